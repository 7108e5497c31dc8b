"""Where llama.cpp puts a model's layers: moved to localinfer.hardware.layer_split, where the planner reads it too
(hardware sits below backends). Kept so the backend's modules import it from beside them."""

from localinfer.hardware.layer_split import assign, describe, explain, parse_tensor_split

__all__ = ["assign", "describe", "explain", "parse_tensor_split"]
