"""One dataset out of the pins a model repo names per role: train, val, holdout.

`mlops.yaml`'s `data:` names a lock file per role, and a role takes the split of its
own name from that lock. `combine` makes one lock of those splits (pure), so prepare
checks them together: the train/val/holdout overlap check then spans locks, and the
combined digest is the one the model's lineage records. When every role comes from
one lock holding just these splits, the combined digest is that lock's own digest
(the same canonical serialisation, `datapins.lock.dataset_digest`).
"""

from __future__ import annotations

from typing import Mapping

from datapins.errors import DataError
from datapins.lock import DataLock, SplitPin, make_lock

__all__ = ["combine"]


def combine(locks: Mapping[str, tuple[str, DataLock]]) -> DataLock:
    """`{role: (lock file, lock)}` -> one lock of each role's split; DataError naming the
    lock file and the role when a split is missing or two locks disagree."""
    splits: dict[str, SplitPin] = {}
    owner: dict[str, tuple[str, str]] = {}  # image path -> (sha256, lock file)
    sources = {lock.source for _, lock in locks.values()}
    if len(sources) > 1:
        listed = ", ".join(f"data.{role}: {file} ({lock.source})"
                           for role, (file, lock) in sorted(locks.items()))
        raise DataError(f"the pins come from {len(sources)} sources ({listed}); prepare reads "
                        "one source per run: snapshot every role from the same storage")
    for role, (file, lock) in sorted(locks.items()):
        if role not in lock.splits:
            raise DataError(f"{file}: no split {role!r} (its splits: "
                            f"{', '.join(sorted(lock.splits))}); data.{role} names this lock")
        split = lock.splits[role]
        for pin in (split.annotations, *split.files, *split.images):
            seen = owner.setdefault(pin.path, (pin.sha256, file))
            if seen[0] != pin.sha256:
                raise DataError(f"{pin.path}: pinned with different content by {seen[1]} and "
                                f"{file} (data.{role}); two roles cannot share a path")
        splits[role] = split
    names = sorted({lock.name for _, lock in locks.values()})
    layouts = sorted({lock.layout for _, lock in locks.values()})  # each split says how to read
    return make_lock("+".join(names), sources.pop(), splits, layout="+".join(layouts))
