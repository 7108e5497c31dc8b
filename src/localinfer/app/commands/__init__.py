"""One module per ``localinfer`` sub-command: ``add_parser(subparsers)`` and ``run(args, settings)``.

This package's modules are the only place outside the TUI that prints."""
