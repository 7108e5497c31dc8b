"""How the TUI (and anything else) talks to an engine: in-process, or a running ``localinfer serve`` over HTTP."""
