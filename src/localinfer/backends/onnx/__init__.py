"""The ONNX Runtime backend (onnxruntime-genai), imported lazily: see ``model.import_genai``."""
