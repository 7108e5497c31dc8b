"""GGUF quantization and its quality: ``gguf`` (llama_model_quantize in a child process, ``worker``), ``imatrix``
and ``imatrix_collect`` (importance matrices), ``perplexity`` (perplexity and KL divergence against a base, as
llama-perplexity measures them), ``lineage`` (what a quantized file was made from). Conversion to ONNX is
``localinfer.convert``."""
