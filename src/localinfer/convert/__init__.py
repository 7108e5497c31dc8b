"""Conversion to ONNX: ``onnx`` (a GGUF or a Hugging Face folder in, an onnxruntime-genai model folder registered
in the store out), ``gguf_source`` (a GGUF made ready for the model builder), ``builder`` (onnxruntime-genai's model
builder in a child process) and ``quality`` (how far the build's token distributions are from its GGUF's)."""
