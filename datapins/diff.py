"""What changed in the data between two locks: pure, for the pull request's body.

Images are compared by content (sha256) per split, so a renamed file is neither added
nor removed; class counts are annotation counts summed over all splits; the label
distribution shift is the total variation distance between the two class
distributions, TVD = ½ Σ |p(c) − q(c)|: 0 when the proportions are unchanged, 1 when
the two share no class.
"""

from __future__ import annotations

import collections
import dataclasses

from datapins.lock import DataLock

__all__ = ["ClassChange", "DataDiff", "SplitChange", "diff", "render_markdown"]


@dataclasses.dataclass(frozen=True)
class SplitChange:
    """One split: images before and after, and how many were added and removed."""

    split: str
    before: int
    after: int
    added: int
    removed: int


@dataclasses.dataclass(frozen=True)
class ClassChange:
    """One class: annotations before and after, and the relative change (None: new class)."""

    name: str
    before: int
    after: int

    @property
    def change(self) -> float | None:
        """(after − before) / before, or None when the class is new."""
        return None if self.before == 0 else (self.after - self.before) / self.before


@dataclasses.dataclass(frozen=True)
class DataDiff:
    """The change from `old` to `new`."""

    old: str
    new: str
    splits: list[SplitChange]
    classes: list[ClassChange]
    tvd: float

    @property
    def added(self) -> int:
        """Images added over all splits."""
        return sum(s.added for s in self.splits)

    @property
    def removed(self) -> int:
        """Images removed over all splits."""
        return sum(s.removed for s in self.splits)


def _totals(lock: DataLock) -> collections.Counter[str]:
    total: collections.Counter[str] = collections.Counter()
    for split in lock.splits.values():
        total.update(split.classes)
    return total


def tvd(p: collections.Counter[str], q: collections.Counter[str]) -> float:
    """Total variation distance of two count distributions (0 if either is empty)."""
    np, nq = sum(p.values()), sum(q.values())
    if not np or not nq:
        return 0.0
    return 0.5 * sum(abs(p[c] / np - q[c] / nq) for c in p.keys() | q.keys())


def diff(old: DataLock, new: DataLock) -> DataDiff:
    """Compare two locks."""
    splits = []
    for name in sorted(old.splits.keys() | new.splits.keys()):
        a = {p.sha256 for p in old.splits[name].images} if name in old.splits else set()
        b = {p.sha256 for p in new.splits[name].images} if name in new.splits else set()
        splits.append(SplitChange(name, len(a), len(b), len(b - a), len(a - b)))
    p, q = _totals(old), _totals(new)
    classes = [ClassChange(c, p[c], q[c]) for c in sorted(p.keys() | q.keys())]
    return DataDiff(old.name, new.name, splits, classes, tvd(p, q))


def _pct(change: float | None) -> str:
    return "new" if change is None else f"{change * 100:+.1f} %"


def render_markdown(d: DataDiff) -> str:
    """The diff as Markdown: a summary line, then a table per splits and per classes."""
    moved = [c for c in d.classes if c.before != c.after]
    biggest = max(moved, key=lambda c: abs(c.change) if c.change is not None else float("inf"),
                  default=None)
    summary = f"**Data: {d.old} → {d.new}**: {d.added:+,} images, {d.removed:,} removed"
    if biggest is not None:
        summary += f", '{biggest.name}' {_pct(biggest.change)}"
    summary += f"; label shift (TVD) {d.tvd:.3f}"
    lines = [summary, "", "| split | images before | images after | added | removed |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {s.split} | {s.before:,} | {s.after:,} | +{s.added:,} | -{s.removed:,} |"
              for s in d.splits]
    lines += ["", "| class | boxes before | boxes after | change |", "|---|---:|---:|---:|"]
    lines += [f"| {c.name} | {c.before:,} | {c.after:,} | "
              f"{'0 %' if c.before == c.after else _pct(c.change)} |" for c in d.classes]
    return "\n".join(lines) + "\n"
