"""`mlops data diff` (issue 29): what changed in the data, for the pull request's body.
Pure: two locks in, numbers and Markdown out."""

import hashlib

import pytest

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
        "| class | boxes before | boxes after | change |\n"
        "|---|---:|---:|---:|\n"
        "| bottle | 20 | 27 | +35.0 % |\n"
        "| can | 80 | 80 | 0 % |\n"
        "| cup | 0 | 13 | new |\n")


def test_cli_diff_prints_the_markdown(tmp_path, capsys):
    write_lock(OLD, tmp_path / "old.json")
    write_lock(NEW, tmp_path / "new.json")
    assert main(["data", "diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0
    assert capsys.readouterr().out == render_markdown(diff(OLD, NEW))


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
