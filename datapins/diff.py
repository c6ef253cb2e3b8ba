"""What changed in the data between two locks: pure, for the pull request's body.

Per split: images added and removed by content (sha256), class counts before and after,
and the label shift (TVD) with a seeded permutation noise floor (the null's 95th
percentile and the p-value; units are images when the annotation files are at hand,
else boxes from the lock's counts); with the annotation files, boxes relabelled on
unchanged images, matched by position and counted by pair. Why: docs/canary.md, "The
data diff".
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from datapins.coco import parse_coco
from datapins.lock import DataLock, SplitPin

__all__ = ["ClassChange", "DataDiff", "Noise", "Relabel", "SplitChange", "diff",
           "render_markdown", "tvd"]

PERMUTATIONS = 500
IMAGES = "images"  # COCO file_name is relative to images/ in the source (datapins/__init__.py)


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
class Noise:
    """The permutation null of one split's TVD."""

    unit: str  # "images" or "boxes"
    p95: float
    p_value: float
    permutations: int


@dataclasses.dataclass(frozen=True)
class Relabel:
    """Boxes on images whose content is unchanged, matched by position."""

    images: int  # images in both versions
    changed_images: int  # of those, with any box relabelled, added or removed
    relabelled: int
    added: int
    removed: int
    pairs: dict[str, int]  # "old class -> new class": boxes


@dataclasses.dataclass(frozen=True)
class SplitChange:
    """One split: images before and after, added and removed, and its labels' shift."""

    split: str
    before: int
    after: int
    added: int
    removed: int
    classes: tuple[ClassChange, ...] = ()
    tvd: float = 0.0
    noise: Noise | None = None
    relabel: Relabel | None = None


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


def tvd(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """Total variation distance of two count distributions (0 if either is empty)."""
    np_, nq = sum(p.values()), sum(q.values())
    if not np_ or not nq:
        return 0.0
    return 0.5 * sum(abs(p.get(c, 0) / np_ - q.get(c, 0) / nq) for c in set(p) | set(q))


def _tvd_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """TVD of each row of counts `a` against the same row of `b`."""
    na, nb = a.sum(axis=1, keepdims=True), b.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 0.5 * np.abs(a / na - b / nb).sum(axis=1)
    return np.where((na[:, 0] > 0) & (nb[:, 0] > 0), out, 0.0)


def _noise(units_old: np.ndarray, units_new: np.ndarray, unit: str, observed: float,
           permutations: int, rng: np.random.Generator) -> Noise | None:
    """The permutation null of the TVD between two groups of units (rows: class counts)."""
    n_old, n_new = len(units_old), len(units_new)
    if not n_old or not n_new or not permutations:
        return None
    pooled = np.vstack([units_old, units_new]).astype(float)
    total = pooled.sum(axis=0)
    null = []
    chunk = max(1, min(permutations, 4_000_000 // max(1, len(pooled))))
    for first in range(0, permutations, chunk):
        size = min(chunk, permutations - first)
        picks = np.argsort(rng.random((size, len(pooled))), axis=1)[:, :n_old]
        chosen = np.zeros((size, len(pooled)))
        np.put_along_axis(chosen, picks, 1.0, axis=1)
        old = chosen @ pooled
        null.append(_tvd_rows(old, total - old))
    values = np.concatenate(null)
    p_value = (1 + int(np.sum(values >= observed - 1e-12))) / (1 + len(values))
    return Noise(unit, float(np.percentile(values, 95)), p_value, len(values))


def _box_noise(old: Mapping[str, int], new: Mapping[str, int], names: list[str], observed: float,
               permutations: int, rng: np.random.Generator) -> Noise | None:
    """The null with boxes as units, from class counts alone: the old group's counts are a
    multivariate hypergeometric draw of its size from the pooled boxes."""
    a = np.array([old.get(c, 0) for c in names], dtype=np.int64)
    b = np.array([new.get(c, 0) for c in names], dtype=np.int64)
    if not a.sum() or not b.sum() or not permutations:
        return None
    draws = rng.multivariate_hypergeometric(a + b, int(a.sum()), size=permutations)
    values = _tvd_rows(draws.astype(float), (a + b - draws).astype(float))
    p_value = (1 + int(np.sum(values >= observed - 1e-12))) / (1 + len(values))
    return Noise("boxes", float(np.percentile(values, 95)), p_value, len(values))


Boxes = dict[str, list[tuple[tuple[float, ...], str]]]
"""Per image sha256: its boxes (position rounded to half a pixel, class name)."""


def _boxes(split: SplitPin, annotations: Mapping[str, bytes]) -> Boxes | None:
    """Each pinned image's boxes from the split's annotation file (None: not at hand)."""
    data = annotations.get(split.annotations.sha256)
    if data is None:
        return None
    coco = parse_coco(data, split.annotations.path)
    names = {c.id: c.name for c in coco.categories}
    by_path = {p.path: p.sha256 for p in split.images}
    image_sha = {img.id: by_path.get(f"{IMAGES}/{img.file_name}") for img in coco.images}
    out: Boxes = {sha: [] for sha in by_path.values()}
    for ann in coco.annotations:
        sha = image_sha.get(ann.image_id)
        if sha is not None:
            position = tuple(round(v * 2) / 2 for v in ann.bbox)
            out[sha].append((position, names.get(ann.category_id, str(ann.category_id))))
    return out


def _unit_rows(boxes: Boxes, names: list[str]) -> np.ndarray:
    index = {c: i for i, c in enumerate(names)}
    rows = np.zeros((len(boxes), len(names)))
    for r, image in enumerate(boxes.values()):
        for _, name in image:
            rows[r, index[name]] += 1
    return rows


def _relabel(old: Boxes, new: Boxes) -> Relabel:
    both = sorted(set(old) & set(new))
    changed = relabelled = added = removed = 0
    pairs: collections.Counter[str] = collections.Counter()
    for sha in both:
        before: dict[tuple[float, ...], list[str]] = collections.defaultdict(list)
        for position, name in old[sha]:
            before[position].append(name)
        after: dict[tuple[float, ...], list[str]] = collections.defaultdict(list)
        for position, name in new[sha]:
            after[position].append(name)
        moved = 0
        for position in before.keys() | after.keys():
            a, b = collections.Counter(before.get(position, [])), \
                collections.Counter(after.get(position, []))
            gone, came = list((a - b).elements()), list((b - a).elements())
            for x, y in zip(sorted(gone), sorted(came)):
                pairs[f"{x} -> {y}"] += 1
            swapped = min(len(gone), len(came))
            relabelled += swapped
            removed += len(gone) - swapped
            added += len(came) - swapped
            moved += len(gone) + len(came)
        changed += moved > 0
    return Relabel(len(both), changed, relabelled, added, removed, dict(sorted(pairs.items())))


def diff(old: DataLock, new: DataLock, annotations: Mapping[str, bytes] | None = None,
         permutations: int = PERMUTATIONS, seed: int = 0) -> DataDiff:
    """Compare two locks; `annotations` maps a pinned annotation file's sha256 to its
    bytes, for image-level noise floors and relabelled boxes where both sides have them."""
    annotations = annotations or {}
    rng = np.random.default_rng(seed)
    splits = []
    for name in sorted(old.splits.keys() | new.splits.keys()):
        a_pin, b_pin = old.splits.get(name), new.splits.get(name)
        a = {p.sha256 for p in a_pin.images} if a_pin else set()
        b = {p.sha256 for p in b_pin.images} if b_pin else set()
        p = collections.Counter(a_pin.classes if a_pin else {})
        q = collections.Counter(b_pin.classes if b_pin else {})
        names = sorted(p.keys() | q.keys())
        shift = tvd(p, q)
        noise = relabel = None
        if a_pin and b_pin:
            boxes_a, boxes_b = _boxes(a_pin, annotations), _boxes(b_pin, annotations)
            if boxes_a is not None and boxes_b is not None:
                names = sorted(set(names) | {n for img in (*boxes_a.values(), *boxes_b.values())
                                             for _, n in img})
                noise = _noise(_unit_rows(boxes_a, names), _unit_rows(boxes_b, names), "images",
                               shift, permutations, rng)
                relabel = _relabel(boxes_a, boxes_b)
            else:
                noise = _box_noise(p, q, names, shift, permutations, rng)
        splits.append(SplitChange(name, len(a), len(b), len(b - a), len(a - b),
                                  tuple(ClassChange(c, p[c], q[c]) for c in sorted(p | q)),
                                  shift, noise, relabel))
    p, q = _totals(old), _totals(new)
    classes = [ClassChange(c, p[c], q[c]) for c in sorted(p.keys() | q.keys())]
    return DataDiff(old.name, new.name, splits, classes, tvd(p, q))


def _pct(change: float | None) -> str:
    return "new" if change is None else f"{change * 100:+.1f} %"


def _shift(s: SplitChange) -> str:
    if s.noise is None:
        return f"| {s.split} | {s.tvd:.3f} | - | - |"
    beyond = "**beyond noise**" if s.noise.p_value < 0.05 else "within noise"
    return (f"| {s.split} | {s.tvd:.3f} | {s.noise.p95:.3f} ({s.noise.unit}) | "
            f"{s.noise.p_value:.3f}, {beyond} |")


def _relabels(splits: Sequence[SplitChange]) -> list[str]:
    rows = [s for s in splits if s.relabel is not None]
    if not rows:
        return []
    out = ["", "| split | unchanged images | with boxes changed | relabelled | added | removed "
           "| most relabelled |", "|---|---:|---:|---:|---:|---:|---|"]
    for s in rows:
        r = s.relabel
        assert r is not None
        top = ", ".join(f"{pair} x{n}" for pair, n in
                        sorted(r.pairs.items(), key=lambda kv: -kv[1])[:3]) or "-"
        out.append(f"| {s.split} | {r.images:,} | {r.changed_images:,} | {r.relabelled:,} | "
                   f"{r.added:,} | {r.removed:,} | {top} |")
    return out


def render_markdown(d: DataDiff) -> str:
    """The diff as Markdown: a summary line, then tables per split, per split's label shift
    (with its noise floor), per class, and relabelled boxes where the annotations were read."""
    moved = [c for c in d.classes if c.before != c.after]
    biggest = max(moved, key=lambda c: abs(c.change) if c.change is not None else float("inf"),
                  default=None)
    summary = f"**Data: {d.old} → {d.new}**: {d.added:+,} images, {d.removed:,} removed"
    if biggest is not None:
        summary += f", '{biggest.name}' {_pct(biggest.change)}"
    summary += f"; label shift (TVD) {d.tvd:.3f}"
    beyond = [s.split for s in d.splits if s.noise is not None and s.noise.p_value < 0.05]
    if beyond:
        summary += f", beyond noise in {', '.join(beyond)}"
    lines = [summary, "", "| split | images before | images after | added | removed |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {s.split} | {s.before:,} | {s.after:,} | +{s.added:,} | -{s.removed:,} |"
              for s in d.splits]
    lines += ["", "| split | label shift (TVD) | noise, 95 % (unit) | p |", "|---|---:|---:|---|"]
    lines += [_shift(s) for s in d.splits]
    lines += ["", "| class | boxes before | boxes after | change |", "|---|---:|---:|---:|"]
    lines += [f"| {c.name} | {c.before:,} | {c.after:,} | "
              f"{'0 %' if c.before == c.after else _pct(c.change)} |" for c in d.classes]
    lines += _relabels(d.splits)
    if any(s.noise is not None and s.noise.unit == "boxes" for s in d.splits):
        lines += ["", "Noise from boxes (the annotation files were not at hand): boxes of one "
                      "image move together, so the true floor is higher."]
    return "\n".join(lines) + "\n"
