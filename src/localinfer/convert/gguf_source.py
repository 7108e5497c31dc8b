"""A GGUF file made ready for onnxruntime-genai's model builder, which reads only F16/F32 GGUF weights and takes
the model's config and tokenizer from a Hugging Face folder.

- ``dequantize`` writes the GGUF again with every tensor dequantized (gguf-py's ``dequantize``) to float32
  (float16 for big models), metadata kept, one tensor in memory at a time. A tied output head (no
  ``output.weight``) gets its own copy of the token embeddings, as the builder's GGUF reader expects one.
- ``write_hf_folder`` derives ``config.json`` and the tokenizer files from the GGUF's metadata with transformers
  (``gguf_file=``), with the chat template and the BOS rule the GGUF carries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.quants import dequantize as dequantize_tensor

from localinfer.errors import ConvertError
from localinfer.progress import ProgressEvent, ProgressSink, ignore_progress

# float32 keeps the dequantized weights exact (float16 rounding alone flipped a greedy token of SmolLM2 135M
# within 6 tokens); past this size the intermediate file and the builder's memory would be too much, and
# float16 halves them.
FLOAT32_UP_TO = 8 << 30
_SKIPPED_KEYS = ("GGUF.", "general.file_type", "general.quantization_version")
_FLOAT_FILE_TYPES = {
    np.dtype(np.float32): gguf.LlamaFileType.ALL_F32,
    np.dtype(np.float16): gguf.LlamaFileType.MOSTLY_F16,
}


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.fields.get(key)
    return field.contents() if field is not None else None


def _shape(tensor: Any) -> tuple[int, ...]:
    """A tensor's shape in numpy's order (GGUF lists dimensions innermost first)."""
    return tuple(int(n) for n in reversed(tensor.shape.tolist()))


def dequantize(
    source: Path, target: Path, *, float32_up_to: int = FLOAT32_UP_TO, progress: ProgressSink = ignore_progress
) -> np.dtype[Any]:
    """Write ``source`` to ``target`` with every tensor in float32, or, when that would take more than
    ``float32_up_to`` bytes, its matrices in float16 (vectors stay float32); return the matrices' type.
    Raises ConvertError for a file gguf-py cannot read or a tensor type it cannot dequantize."""
    try:
        reader = gguf.GGUFReader(source)
    except (OSError, ValueError) as exc:
        raise ConvertError(f"{source} cannot be read as GGUF: {exc}", hint="is it a complete GGUF file?") from exc
    arch = str(_field(reader, "general.architecture") or "llama")
    tensors = [(t.name, t) for t in reader.tensors]
    names = {name for name, _ in tensors}
    if "output.weight" not in names and "token_embd.weight" in names:  # tied: the builder wants its own head
        tensors.append(("output.weight", next(t for name, t in tensors if name == "token_embd.weight")))
    elements = sum(int(np.prod(_shape(t))) for _, t in tensors)
    dtype = np.dtype(np.float32 if elements * 4 <= float32_up_to else np.float16)
    writer = gguf.GGUFWriter(target, arch)
    for key, field in reader.fields.items():
        if key.startswith(_SKIPPED_KEYS) or key == "general.architecture":
            continue
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), field.types[0], sub_type)
    writer.add_file_type(int(_FLOAT_FILE_TYPES[np.dtype(dtype)]))
    for name, tensor in tensors:
        shape = _shape(tensor)
        out_dtype = np.dtype(dtype) if len(shape) > 1 else np.dtype(np.float32)
        writer.add_tensor_info(name, shape, out_dtype, int(np.prod(shape)) * out_dtype.itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    total, done = sum(int(t.n_bytes) for _, t in tensors), 0
    for name, tensor in tensors:
        try:
            data = dequantize_tensor(tensor.data, tensor.tensor_type).reshape(_shape(tensor))
        except NotImplementedError as exc:
            raise ConvertError(
                f"{source.name}: tensor {name} is {tensor.tensor_type.name}, which gguf-py cannot dequantize",
                hint="convert from an F16/F32 GGUF or a Hugging Face folder instead",
            ) from exc
        writer.write_tensor_data(data.astype(np.dtype(dtype) if data.ndim > 1 else np.float32, copy=False))
        done += int(tensor.n_bytes)
        progress(ProgressEvent("dequantizing the GGUF weights", total=total, completed=done))
    writer.close()
    return dtype


def write_hf_folder(gguf_file: Path, folder: Path) -> int:
    """Write ``config.json`` and the tokenizer files of the model in ``gguf_file`` (a float GGUF written by
    ``dequantize``) into ``folder``; return its number of layers. Raises ConvertError."""
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
        tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    except Exception as exc:  # transformers' GGUF readers fail in many ways on metadata they do not expect
        raise ConvertError(
            f"transformers cannot read the model or tokenizer of this GGUF: {exc}",
            hint="convert from the model's Hugging Face folder instead",
        ) from exc
    architecture = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type)
    if not config.architectures and architecture:
        config.architectures = [architecture]
    reader = gguf.GGUFReader(gguf_file)
    template = _field(reader, "tokenizer.chat_template")
    if template:
        tokenizer.chat_template = str(template)
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    add_bos = _field(reader, "tokenizer.ggml.add_bos_token")
    if add_bos is not None:
        set_add_bos(folder, bool(add_bos))
    return int(config.num_hidden_layers or 0)


def set_add_bos(folder: Path, add_bos: bool) -> None:
    """Write the GGUF's BOS rule (what llama.cpp does with the model) into ``folder``'s ``tokenizer_config.json``,
    where the ONNX backend reads it. transformers drops it when it saves the tokenizer again."""
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    settings["add_bos_token"] = add_bos
    path.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def gguf_add_bos(gguf_file: Path) -> bool | None:
    """The GGUF's ``tokenizer.ggml.add_bos_token``, None when it does not say."""
    value = _field(gguf.GGUFReader(gguf_file), "tokenizer.ggml.add_bos_token")
    return None if value is None else bool(value)
