"""`mlops data diff` (issue 29): what changed in the data, for the pull request's body.
Pure: two locks in (and their annotation files when at hand), numbers and Markdown out.
Per split, the label shift has a permutation noise floor (issue 43): two samples of one
distribution are not a shift, a val-only shift is not diluted by train, and relabelled
boxes on unchanged images are counted."""

import hashlib
import json

import numpy as np
import pytest

from datapins.cache import Cache
from datapins.diff import diff, render_markdown
from datapins.lock import FilePin, SplitPin, make_lock, write_lock
from mlops.cli import main


def _img(name: str) -> FilePin:
    sha = hashlib.sha256(name.encode()).hexdigest()
    return FilePin(path=f"images/{name}", size=100, sha256=sha)


def _split(images, classes) -> SplitPin:
    return SplitPin(annotations=_img("ann-" + "-".join(images)), classes=classes,
                    images=[_img(i) for i in images])


OLD = make_lock("w47", "s3://b/w47", {
    "train": _split(["a", "b", "c", "d"], {"bottle": 20, "can": 60}),
    "val": _split(["v1", "v2"], {"bottle": 0, "can": 20}),
})
NEW = make_lock("w48", "s3://b/w48", {
    # c removed, e f g added; a renamed to x (same content: neither added nor removed)
    "train": SplitPin(annotations=_img("ann2"), classes={"bottle": 27, "can": 60, "cup": 13},
                      images=[FilePin(path="images/x", size=100, sha256=_img("a").sha256),
                              _img("b"), _img("d"), _img("e"), _img("f"), _img("g")]),
    "val": _split(["v1", "v2"], {"bottle": 0, "can": 20}),
})


def test_images_added_and_removed_per_split_by_content():
    d = diff(OLD, NEW)
    by = {s.split: s for s in d.splits}
    assert (by["train"].before, by["train"].after, by["train"].added, by["train"].removed) == \
        (4, 6, 3, 1)
    assert (by["val"].added, by["val"].removed) == (0, 0)
    assert (d.added, d.removed) == (3, 1)


def test_class_counts_and_the_label_distribution_shift():
    d = diff(OLD, NEW)
    by = {c.name: c for c in d.classes}
    assert (by["bottle"].before, by["bottle"].after) == (20, 27)
    assert by["bottle"].change == pytest.approx(0.35)
    assert by["cup"].change is None and by["can"].change == 0
    # old: bottle 20/100, can 80/100; new: bottle 27/120, can 80/120, cup 13/120
    expected = 0.5 * (abs(20 / 100 - 27 / 120) + abs(80 / 100 - 80 / 120) + abs(0 - 13 / 120))
    assert d.tvd == pytest.approx(expected)
    assert diff(OLD, OLD).tvd == 0


def test_the_markdown_for_the_pull_request():
    assert render_markdown(diff(OLD, NEW)) == (
        "**Data: w47 → w48**: +3 images, 1 removed, 'cup' new; label shift (TVD) 0.133\n"
        "\n"
        "| split | images before | images after | added | removed |\n"
        "|---|---:|---:|---:|---:|\n"
        "| train | 4 | 6 | +3 | -1 |\n"
        "| val | 2 | 2 | +0 | -0 |\n"
        "\n"
        "| split | label shift (TVD) | noise, 95 % (unit) | p |\n"
        "|---|---:|---:|---|\n"
        "| train | 0.150 | 0.150 (boxes) | 0.060, within noise |\n"
        "| val | 0.000 | 0.000 (boxes) | 1.000, within noise |\n"
        "\n"
        "| class | boxes before | boxes after | change |\n"
        "|---|---:|---:|---:|\n"
        "| bottle | 20 | 27 | +35.0 % |\n"
        "| can | 80 | 80 | 0 % |\n"
        "| cup | 0 | 13 | new |\n"
        "\n"
        "Noise from boxes (the annotation files were not at hand): boxes of one image move "
        "together, so the true floor is higher.\n")


def test_cli_diff_prints_the_markdown(tmp_path, capsys):
    write_lock(OLD, tmp_path / "old.json")
    write_lock(NEW, tmp_path / "new.json")
    assert main(["data", "diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"),
                 "--cache", str(tmp_path / "cache")]) == 0
    assert capsys.readouterr().out == render_markdown(diff(OLD, NEW))


# -- per split, with a noise floor, and relabelled boxes (issue 43) ------------------------

def _coco(images: dict[str, list[tuple[str, tuple[float, ...]]]]) -> bytes:
    """A COCO file: file_name -> boxes (class, bbox)."""
    names = sorted({c for boxes in images.values() for c, _ in boxes} | {"bottle", "can"})
    cats = {n: i + 1 for i, n in enumerate(names)}
    doc = {"images": [], "annotations": [], "categories": [{"id": i, "name": n}
                                                         for n, i in cats.items()]}
    for k, (file_name, boxes) in enumerate(sorted(images.items()), start=1):
        doc["images"].append({"id": k, "file_name": file_name, "width": 64, "height": 64})
        for c, bbox in boxes:
            doc["annotations"].append({"id": len(doc["annotations"]) + 1, "image_id": k,
                                       "category_id": cats[c], "bbox": list(bbox)})
    return json.dumps(doc).encode()


def _pinned(name: str, images: dict[str, list[tuple[str, tuple[float, ...]]]]):
    """A split and its annotation file's bytes; images are pinned by their name's digest."""
    data = _coco(images)
    ann = FilePin(path=f"annotations/{name}.json", size=len(data),
                  sha256=hashlib.sha256(data).hexdigest())
    counts: dict[str, int] = {}
    for boxes in images.values():
        for c, _ in boxes:
            counts[c] = counts.get(c, 0) + 1
    pins = [FilePin(path=f"images/{f}", size=1, sha256=hashlib.sha256(f.encode()).hexdigest())
            for f in sorted(images)]
    return SplitPin(annotations=ann, classes=counts, images=pins), data


def _sample(rng, n: int, p_bottle: float, crowd: float = 0.0, prefix: str = "i"):
    """n images of bottles and cans; a share `crowd` of them crowds of 12 of one class."""
    out = {}
    for k in range(n):
        many = rng.random() < crowd
        count = 12 if many else int(rng.integers(1, 3))
        first = "bottle" if rng.random() < p_bottle else "can"
        out[f"{prefix}{k:04d}.png"] = [
            (first if many else ("bottle" if rng.random() < p_bottle else "can"),
             (4.0 * j, 0.0, 4.0, 4.0)) for j in range(count)]
    return out


def test_a_val_only_shift_is_seen_in_val_and_not_diluted():
    """train unchanged (2000 boxes), val's bottle share 30 % -> 50 % (200 boxes): the total
    TVD is small, val's is the shift, beyond its noise floor; train's is within."""
    rng = np.random.default_rng(1)
    train, _ = _pinned("train", _sample(rng, 1300, 0.3))
    val_a, _ = _pinned("val", _sample(rng, 130, 0.3, prefix="a"))
    val_b, _ = _pinned("val", _sample(rng, 130, 0.5, prefix="b"))
    old = make_lock("a", "s3://x", {"train": train, "val": val_a})
    new = make_lock("b", "s3://x", {"train": train, "val": val_b})
    d = diff(old, new)
    by = {s.split: s for s in d.splits}
    assert by["val"].tvd > 4 * d.tvd
    assert by["val"].noise is not None and by["val"].noise.p_value < 0.01
    assert by["train"].tvd == 0 and by["train"].noise.p_value == 1.0
    assert "beyond noise in val" in render_markdown(d)


def test_two_samples_of_one_distribution_are_within_noise_counted_by_images():
    """Draws of the same crowded data (a fifth of the images a crowd of twelve of one
    class), 40 pairs: by boxes (a crowd moves twelve at once) the permutation test calls
    half of them a shift at 5 %; by images, with the annotation files, about 5 % as it
    should, and the floor it gives is far higher."""
    rng = np.random.default_rng(3)
    called = {"boxes": 0, "images": 0}
    floors = {"boxes": [], "images": []}
    for k in range(40):
        split_a, data_a = _pinned("val", _sample(rng, 150, 0.4, crowd=0.2, prefix=f"a{k}-"))
        split_b, data_b = _pinned("val", _sample(rng, 150, 0.4, crowd=0.2, prefix=f"b{k}-"))
        old = make_lock("a", "s3://x", {"val": split_a})
        new = make_lock("b", "s3://x", {"val": split_b})
        files = {split_a.annotations.sha256: data_a, split_b.annotations.sha256: data_b}
        for unit, d in (("boxes", diff(old, new, permutations=200)),
                        ("images", diff(old, new, files, permutations=200))):
            noise = d.splits[0].noise
            assert noise is not None and noise.unit == unit
            called[unit] += noise.p_value < 0.05
            floors[unit].append(noise.p95)
    assert called["boxes"] >= 12, called
    assert called["images"] <= 5, called
    assert np.median(floors["images"]) > 1.5 * np.median(floors["boxes"])


def test_relabelled_boxes_on_unchanged_images_are_counted():
    """Two unchanged images swap one box each, bottle <-> can: the class counts and the TVD
    do not move at all, the relabel count does."""
    images = {"a.png": [("bottle", (0, 0, 4, 4)), ("can", (8, 0, 4, 4))],
              "b.png": [("can", (0, 0, 4, 4))], "c.png": [("bottle", (0, 0, 4, 4))]}
    moved = {**images, "b.png": [("bottle", (0, 0, 4, 4))], "c.png": [("can", (0, 0, 4, 4))]}
    split_a, data_a = _pinned("train", images)
    split_b, data_b = _pinned("train", moved)
    old, new = make_lock("a", "s3://x", {"train": split_a}), make_lock("b", "s3://x",
                                                                       {"train": split_b})
    d = diff(old, new, {split_a.annotations.sha256: data_a, split_b.annotations.sha256: data_b})
    r = d.splits[0].relabel
    assert d.tvd == 0 and r is not None
    assert (r.images, r.changed_images, r.relabelled, r.added, r.removed) == (3, 2, 2, 0, 0)
    assert r.pairs == {"bottle -> can": 1, "can -> bottle": 1}
    assert "| train | 3 | 2 | 2 | 0 | 0 | bottle -> can x1, can -> bottle x1 |" in \
        render_markdown(d)


def test_cli_reads_the_annotation_files_from_the_cache(tmp_path, capsys):
    images = {"a.png": [("bottle", (0, 0, 4, 4))], "b.png": [("can", (0, 0, 4, 4))]}
    split_a, data_a = _pinned("train", images)
    split_b, data_b = _pinned("train", {**images, "b.png": [("bottle", (0, 0, 4, 4))]})
    cache = Cache(tmp_path / "cache")
    for split, data in ((split_a, data_a), (split_b, data_b)):
        cache.entry(split.annotations.sha256).parent.mkdir(parents=True, exist_ok=True)
        cache.entry(split.annotations.sha256).write_bytes(data)
    write_lock(make_lock("a", "s3://x", {"train": split_a}), tmp_path / "old.json")
    write_lock(make_lock("b", "s3://x", {"train": split_b}), tmp_path / "new.json")
    assert main(["data", "diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"),
                 "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "(images)" in out and "can -> bottle x1" in out


def test_data_diff_shows_pushed_control_sequences_escaped(tmp_path, capsys):
    """Issue 41, finding 17: class names and paths of a pushed lock reached the
    reviewer's terminal raw through `mlops data diff` (cursor moves, an OSC 52
    clipboard write). They are printed escaped (`cogs.text.printable`)."""
    attack = "cup\x1b[1A\x1b[2K\x1b]52;c;ZXZpbA==\x07"
    new = make_lock("w48", "s3://b/w48", {
        "train": SplitPin(annotations=_img("ann2"), classes={"bottle": 20, attack: 13},
                          images=[_img("a"), _img(f"b{attack}")]),
        "val": _split(["v1", "v2"], {"bottle": 0, "can": 20}),
    })
    write_lock(OLD, tmp_path / "old.lock")
    write_lock(new, tmp_path / "new.lock")
    assert main(["data", "diff", str(tmp_path / "old.lock"), str(tmp_path / "new.lock")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "cup\\x1b[1A\\x1b[2K\\x1b]52;c;ZXZpbA==\\x07" in out


def test_a_dataset_name_with_a_control_character_is_refused(tmp_path, capsys):
    """The lock's `name` is shown to reviewers everywhere: one line of printable text."""
    text = (tmp_path / "ok.lock")
    write_lock(OLD, text)
    bad = text.read_text().replace('"name": "w47"', '"name": "w47\\u001b]52;c;ZXZpbA==\\u0007"')
    assert bad != text.read_text()
    (tmp_path / "bad.lock").write_text(bad)
    assert main(["data", "diff", str(text), str(tmp_path / "bad.lock")]) == 2
    captured = capsys.readouterr()
    assert "bad.lock: name:" in captured.err and "printable" in captured.err
    assert "\x1b" not in captured.err + captured.out
