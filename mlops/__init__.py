"""The face: the `mlops` command line, its web UI, the demo and the image builds.

No other room imports it (the rooms contract in `.importlinter`). Its doors are for
what runs it: the console script and `python -m mlops` (`cli`), and the documentation
build's hooks (`reference`, scripts/docs_hooks.py).
"""

__all__ = [
    "cli",        # main(): the `mlops` command line
    "reference",  # the reference pages, generated from the code
]
