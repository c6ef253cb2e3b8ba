"""The CPU kernels' code path, pinned so one commit trains the same weights on any x86-64 CPU.

Paddle's CPU kernels call MKL, which picks its code path from the CPU it runs on
(AVX-512 on one host, AVX2 on another): the same run then rounds differently and
trains other weights, so "same commit, same weights" held only per CPU type. MKL's
conditional numerical reproducibility (`MKL_CBWR`) fixes the code path. With
`--kernels reproducible` (the default) the kit sets `MKL_CBWR=AVX2`, a path every
x86-64 server CPU of the last decade runs, unless the environment already names one
(an operator's choice wins, and is recorded); `--kernels fast` leaves MKL to pick the
fastest path for the CPU, trading reproducibility across CPU types for speed
(docs/gate.md has the measured cost). MKL reads the variable once, when Paddle first
loads it, so `pin` runs before Paddle is imported. Reproducibility also needs the same
thread count per rank (the kit's `OMP_NUM_THREADS=1`) and the same number of ranks.
"""

from __future__ import annotations

import os

__all__ = ["MODES", "REPRODUCIBLE_PATH", "pin"]

#: `--kernels` choices.
MODES = ("reproducible", "fast")
#: The MKL code path a reproducible run uses.
REPRODUCIBLE_PATH = "AVX2"
_VARIABLE = "MKL_CBWR"


def pin(mode: str) -> str:
    """Pin (or not) MKL's code path for this process and the ranks it starts; returns the
    path in effect for the record: the `MKL_CBWR` value, or "auto" (MKL's own choice)."""
    if mode not in MODES:
        raise ValueError(f"--kernels {mode!r}: choose one of {', '.join(MODES)}")
    if mode == "reproducible":
        os.environ.setdefault(_VARIABLE, REPRODUCIBLE_PATH)
    return os.environ.get(_VARIABLE) or "auto"
