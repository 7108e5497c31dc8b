"""localinfer: local LLM inference with an OpenAI-compatible server."""

__version__ = "0.1.0"
