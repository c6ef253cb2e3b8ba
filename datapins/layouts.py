"""Where a dataset's annotations and images are: the layouts `mlops data snapshot` reads.

`coco` (this project's own: `annotations/<split>.json` + `images/<file_name>`),
`coco2017` (COCO's own release, found without a flag), and `ppdet-coco` / `ppdet-voc` (a
PaddleDetection dataset YAML, `--ppdet-config`, read as PaddleDetection's
`ppdet/data/source/{coco,voc}.py` do, `_BASE_` files merged first). The lock records
which (`DataLock.layout`) and how to read each split, so prepare can lay out what
training expects. A source in none of them gets one message naming the layouts.
Details: docs/guides/data-pins.md.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from typing import Any, Literal

import yaml

from datapins.errors import DataError
from datapins.sources import Source

__all__ = ["LAYOUTS", "Layout", "SplitSource", "detect", "read_ppdet_config"]

LAYOUTS = ("this project's COCO layout (annotations/<split>.json + images/<file_name>), "
           "COCO 2017's own (annotations/instances_<split>2017.json + <split>2017/<file_name>), "
           "or a PaddleDetection dataset YAML (--ppdet-config FILE: a COCODataSet or "
           "VOCDataSet with dataset_dir, image_dir, anno_path, label_list)")

_COCO_RELEASE = re.compile(r"annotations/([a-z_]+?)_([A-Za-z]+)(\d{4})\.json")
#: The annotation files of COCO's releases beside `instances_*` (not detection boxes).
_COCO_OTHERS = {"captions", "person_keypoints", "stuff", "panoptic", "image_info"}


@dataclasses.dataclass(frozen=True)
class SplitSource:
    """Where one split is in its source: the annotation file, the images' folder, the format."""

    split: str
    annotations: str
    image_root: str
    format: Literal["coco", "voc"] = "coco"
    label_list: str | None = None  # VOC: the label list file (None: the 20 VOC classes)


@dataclasses.dataclass(frozen=True)
class Layout:
    """A layout found in a source: its name and where each split is."""

    name: str
    splits: tuple[SplitSource, ...]


def detect(source: Source) -> Layout:
    """The layout of a source without a config: COCO 2017's own, else this project's."""
    files = [p for p in source.list("annotations") if p.endswith(".json") and p.count("/") == 1]
    release: dict[str, list[tuple[str, str]]] = {}
    plain: list[str] = []
    for path in files:
        match = _COCO_RELEASE.fullmatch(path)
        if match and match.group(1) == "instances":
            release.setdefault(match.group(2), []).append((match.group(3), path))
        elif not (match and match.group(1) in _COCO_OTHERS):
            plain.append(path)
    if release and plain:
        raise DataError(f"{source.uri}: both COCO 2017's layout (annotations/instances_*.json) "
                        f"and this project's ({', '.join(plain)}); keep one per source")
    if release:
        splits = []
        for split, years in sorted(release.items()):
            for year, path in sorted(years):
                name = split if len(years) == 1 else f"{split}{year}"
                splits.append(SplitSource(name, path, f"{split}{year}"))
        return Layout("coco2017", tuple(splits))
    if plain:
        return Layout("coco", tuple(SplitSource(pathlib.PurePosixPath(p).stem, p, "images")
                                    for p in sorted(plain)))
    raise DataError(f"{source.uri}: no dataset found; mlops data snapshot reads {LAYOUTS}")


# -- PaddleDetection's dataset YAML ------------------------------------------------------

_SPLITS = {"TrainDataset": "train", "EvalDataset": "val"}
_KINDS = {"COCODataSet": "coco", "VOCDataSet": "voc"}


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that also reads PaddleDetection's `!Class` tags as plain data
    (older dataset configs write `TrainDataset: !COCODataSet {...}`)."""


def _tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
        value.setdefault("name", suffix)
        return value
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_Loader.add_multi_constructor("!", _tagged)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _load(path: pathlib.Path, seen: tuple[pathlib.Path, ...] = ()) -> dict[str, Any]:
    """The YAML with its `_BASE_` files merged under it (theirs first, in order)."""
    path = path.resolve()
    if path in seen:
        raise DataError(f"{path}: _BASE_ includes itself ({' -> '.join(map(str, seen))})")
    try:
        data = yaml.load(path.read_text(), Loader=_Loader) or {}
    except FileNotFoundError:
        raise DataError(f"{path}: no such PaddleDetection config") from None
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a mapping at the top level")
    bases = data.pop("_BASE_", [])
    merged: dict[str, Any] = {}
    for base in [bases] if isinstance(bases, str) else bases:
        merged = _merge(merged, _load(path.parent / str(base), (*seen, path)))
    return _merge(merged, data)


def _relative(value: Any, where: str) -> str:
    text = str(value or "").replace("\\", "/").strip()
    while text.startswith("./"):
        text = text[2:]
    parts = pathlib.PurePosixPath(text).parts
    if text.startswith("/") or ".." in parts:
        raise DataError(f"{where}: {value!r} must be a path inside dataset_dir")
    return text.strip("/")


def read_ppdet_config(path: pathlib.Path) -> tuple[Layout, str]:
    """(layout, dataset_dir as written) of a PaddleDetection dataset YAML.

    Its `TrainDataset` is the `train` split and its `EvalDataset` the `val` split; both
    must share one `dataset_dir` (the dataset's root, one source per lock).
    """
    config = _load(path)
    splits, roots = [], {}
    for key, split in _SPLITS.items():
        entry = config.get(key)
        if entry is None:
            continue
        where = f"{path}: {key}"
        if not isinstance(entry, dict):
            raise DataError(f"{where}: expected a mapping (name, dataset_dir, anno_path, ...)")
        kind = _KINDS.get(str(entry.get("name", "")))
        if kind is None:
            raise DataError(f"{where}: name {entry.get('name')!r} is not a dataset mlops can "
                            f"read; choose {' or '.join(_KINDS)}")
        if not entry.get("anno_path"):
            raise DataError(f"{where}: anno_path is missing")
        roots[key] = str(entry.get("dataset_dir") or "")
        label_list = entry.get("label_list")
        splits.append(SplitSource(
            split, _relative(entry["anno_path"], f"{where}.anno_path"),
            _relative(entry.get("image_dir"), f"{where}.image_dir"), kind,  # type: ignore[arg-type]
            _relative(label_list, f"{where}.label_list") if kind == "voc" and label_list
            else None))
    if not splits:
        raise DataError(f"{path}: no TrainDataset or EvalDataset; a PaddleDetection dataset "
                        "YAML names them (configs/datasets/*.yml)")
    if len(set(roots.values())) > 1:
        listed = ", ".join(f"{k}.dataset_dir {v!r}" for k, v in roots.items())
        raise DataError(f"{path}: the splits lie under different roots ({listed}); one pin "
                        "reads one dataset_dir")
    kinds = {s.format for s in splits}
    name = f"ppdet-{kinds.pop()}" if len(kinds) == 1 else "ppdet"
    return Layout(name, tuple(splits)), next(iter(roots.values()))


def dataset_root(config: pathlib.Path, dataset_dir: str, cwd: pathlib.Path) -> pathlib.Path:
    """Where a config's `dataset_dir` is: absolute as written; relative, from the current
    directory as PaddleDetection's tools read it, else from the config's own folder."""
    path = pathlib.Path(dataset_dir or ".")
    tried = [path] if path.is_absolute() else [cwd / path, config.resolve().parent / path]
    for candidate in tried:
        if candidate.is_dir():
            return candidate
    raise DataError(f"{config}: dataset_dir {dataset_dir!r} is not a directory (looked in "
                    f"{' and '.join(str(t) for t in tried)}); give the dataset's root as SOURCE")
