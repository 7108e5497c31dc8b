"""llama.cpp's RPC backend: a model's layers on other machines' devices.

``devices`` binds ggml-rpc (workers registered as devices, the placement of layers over them, lending this
machine's devices); ``wire`` speaks the RPC protocol for what is asked before loading (endpoints, probes, device
memory); ``memory_cap`` caps what a lent device reports (``localinfer rpc --mem``); ``child`` serves a GGUF model on
workers in a child ``localinfer serve`` (``child_wire`` its requests and stream, ``watch`` the workers while it
runs).
"""
