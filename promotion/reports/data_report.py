"""The PR's data section: what changed in the data since production's model was trained.

Each model directory the pipeline made keeps the dataset lock prepare-data verified
(`datalock.json`, beside `model.yaml`). The candidate's is compared with production's
(`datapins.diff`): images added and removed per split, boxes per class before and after,
the label shift (TVD). Without a pinned candidate there is no section; without a pinned
production (the first version, or one trained before pins) the section names the
candidate's pin and says there is nothing to compare with.
"""

from __future__ import annotations

import pathlib

from contracts.artifact import LOCK_FILE
from datapins.diff import diff, render_markdown
from datapins.errors import DataError
from datapins.lock import read_lock

__all__ = ["data_report"]


def data_report(candidate: pathlib.Path, production: pathlib.Path | None) -> str | None:
    """Markdown of the candidate's data against production's (None: the candidate has no pin)."""
    if not (candidate / LOCK_FILE).is_file():
        return None
    new = read_lock(candidate / LOCK_FILE)
    old = None
    if production is not None and (production / LOCK_FILE).is_file():
        try:
            old = read_lock(production / LOCK_FILE)
        except DataError:
            old = None  # a damaged copy beside production: say so below, do not fail the PR
    if old is None:
        images = sum(len(s.images) for s in new.splits.values())
        return (f"**Data: {new.name}** (`{new.digest}`), {images:,} images; production's "
                "data is not pinned, so there is nothing to compare with.\n")
    if old.digest == new.digest:
        return f"**Data: {new.name}**: the same data as production's (`{new.digest}`).\n"
    return render_markdown(diff(old, new))
