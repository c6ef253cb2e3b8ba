"""The `mlops` commands: one module per command group, each with `register(subparsers)`.

How a command stays cheap to start (the one idiom): a command module imports at its top
only what building its parser needs (argparse, the standard library, light modules of
the rooms); everything its handler needs is imported inside the handler, so
`mlops --help` and `mlops X --help` load no heavy library (`tests/test_cli_startup.py`
lists them). An import inside a function, in this package or any room, is that idiom and
needs no comment; a comment says only what is particular (an optional extra, a cycle).
Options several commands share, and their environment defaults, are in
`_options` (not a command: the CLI skips `_` modules).
"""
