"""A seeded synthetic COCO dataset, made once or a week at a time: the examples' generators.

A model repo that makes its own data (the examples do: no download, ever)
brings only how one image is drawn (`render_image(rng, params) -> (PIL image,
[(category id, (x0, y0, x1, y1)), ...])`); this module writes the splits, the
marker that makes a second call a no-op, and the weeks of a team's shared
storage (`--store DIR --week N`) in the layout `mlops data snapshot` pins:
`week-N/annotations/<split>.json` and `week-N/images/<split>/<file>`. Week N
links week N-1's unchanged files (same bytes, so the pins and the cache see them
as the same content), retires the oldest training images and draws new ones
with the week's class weights; val stays byte for byte the same, so two weeks'
models are compared on the same images (and so does a fixed holdout split, for a
generator with `holdout`). A week may swap a share of its new labels between two
classes (`swap`, `swap_share`: a batch with bad labels). Reading a dataset back,
in either layout, is :mod:`modelkit.datasets`.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import random
import shutil
import sys
import zlib
from typing import Any, Callable, Mapping, Sequence

from contracts.errors import ExitCode
from modelkit.datasets import MARKER
from modelkit.files import atomic_write, atomic_write_text

__all__ = ["PNG_FAST", "WEEK_MARKER", "SyntheticCoco", "module_names"]

#: What a generator module offers by name (train.py and the tests call `shapes_data.X`):
#: the generator's own methods, and the kit's readers.
_GENERATOR_NAMES = ("ensure_dataset", "write_week", "digest_of", "existing_digest")
_READER_NAMES = ("has_dataset", "dataset_digest", "load_split")

WEEK_MARKER = "WEEK.json"

#: PIL save options for the generators' PNGs: zlib's run-length strategy after PIL's
#: per-row filter. On the examples' noisy images it encodes in 60 % of the CPU of zlib's
#: default (level 6, Z_FILTERED) and 77 % of level 1's, and the files come out no
#: bigger (about 32 kB a shapes image either way).
#: Lossless like every PNG: the pixels do not depend on it, only the files' bytes.
#: (PIL passes `compress_type` to deflateInit2 as the strategy: PngImagePlugin's
#: `_apply_encoderinfo`, libImaging/ZipEncode.c.)
PNG_FAST: Mapping[str, Any] = {"compress_type": zlib.Z_RLE}

Render = Callable[[random.Random, Mapping[str, Any]], tuple[Any, Sequence[tuple[int, Any]]]]


def _link(src: pathlib.Path, dest: pathlib.Path) -> None:
    """`dest` as a hard link to `src` (a copy across file systems)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        dest.unlink()
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _swap_labels(annotations: list[dict[str, Any]], pair: Sequence[int], share: float,
                 rng: random.Random) -> None:
    """Give each box of class pair[0] or pair[1], with probability `share`, the other's label."""
    a, b = pair
    for ann in annotations:
        if ann["category_id"] in (a, b) and rng.random() < share:
            ann["category_id"] = b if ann["category_id"] == a else a


@dataclasses.dataclass(frozen=True)
class SyntheticCoco:
    """One example's generator: what it draws, its defaults, its weeks."""

    describe: str  # "synthetic shapes": the COCO files' info.description
    categories: Sequence[Mapping[str, Any]]
    defaults: Mapping[str, Any]  # part of the digest (bump its "generator" when drawing changes)
    # week -> retire_32nds, add_32nds, seed, class_weights (and swap, swap_share: label noise)
    weeks: Mapping[int, Mapping[str, Any]]
    render_image: Render
    error: type[Exception]  # the example's DatasetError (its `exit_code` is the CLI's)
    png: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # PIL save options
    holdout: bool = False  # weeks also hold a fixed `holdout` split (num_val images, clean)

    def write_split(self, root: pathlib.Path, split: str, count: int, rng: random.Random,
                    params: Mapping[str, Any], prefix: str = "", first_id: int = 1,
                    first_ann: int = 1) -> dict[str, Any]:
        """Write the PNGs of one split and return its COCO dict."""
        folder = pathlib.Path(root) / split
        folder.mkdir(parents=True, exist_ok=True)
        images: list[dict[str, Any]] = []
        annotations: list[dict[str, Any]] = []
        for index in range(count):
            image, objects = self.render_image(rng, params)
            name = f"{prefix}{index:06d}.png"
            atomic_write(folder / name, lambda tmp: image.save(tmp, format="PNG", **self.png))
            image_id = first_id + index
            images.append({"id": image_id, "file_name": f"{split}/{name}",
                           "width": params["image_size"], "height": params["image_size"]})
            for cat, (x0, y0, x1, y1) in objects:
                w, h = x1 - x0, y1 - y0
                annotations.append({"id": first_ann + len(annotations), "image_id": image_id,
                                    "category_id": cat, "bbox": [x0, y0, w, h],
                                    "area": w * h, "iscrowd": 0})
        return {"info": {"description": f"{self.describe}, {split}", "params": dict(params)},
                "images": images, "annotations": annotations,
                "categories": list(self.categories)}

    @staticmethod
    def digest_of(root: pathlib.Path, params: Mapping[str, Any]) -> str:
        """sha256 over the canonical params and the bytes of train.json and val.json."""
        h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
        for name in ("train.json", "val.json"):
            h.update(name.encode())
            h.update((pathlib.Path(root) / name).read_bytes())
        return "sha256:" + h.hexdigest()

    def existing_digest(self, root: pathlib.Path, params: Mapping[str, Any]) -> str | None:
        """The digest of a complete dataset with these params in ``root``, else None."""
        root = pathlib.Path(root)
        try:
            meta = json.loads((root / MARKER).read_text())
            if meta.get("params") != params:
                return None
            digest = self.digest_of(root, params)
        except (OSError, ValueError):
            return None
        if digest != meta.get("digest"):
            return None
        for split, key in (("train", "num_train"), ("val", "num_val")):
            if not (root / split / f"{params[key] - 1:06d}.png").is_file():
                return None
        return digest

    def ensure_dataset(self, data_dir: str | pathlib.Path,
                       params: Mapping[str, Any] | None = None) -> str:
        """Generate the dataset into ``data_dir`` unless it is already there; return its digest.

        Safe to call from every rank at once: an exclusive ``flock`` on
        ``<data-dir>/.lock`` lets one process generate while the others wait, then
        they find the marker and return. On separate filesystems each rank simply
        generates the identical dataset itself.
        """
        params = dict(self.defaults if params is None else params)
        root = pathlib.Path(data_dir)
        try:
            root.mkdir(parents=True, exist_ok=True)
            lock = open(root / ".lock", "a")
        except OSError as exc:
            raise self.error(f"cannot create data dir {root}: {exc.strerror}") from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            digest = self.existing_digest(root, params)
            if digest is not None:
                return digest
            rng = random.Random(params["seed"])
            for split, key in (("train", "num_train"), ("val", "num_val")):
                coco = self.write_split(root, split, params[key], rng, params)
                atomic_write_text(root / f"{split}.json", json.dumps(coco, indent=None))
            digest = self.digest_of(root, params)
            atomic_write_text(root / MARKER,
                              json.dumps({"params": params, "digest": digest}, indent=2))
            return digest

    def write_week(self, store: str | pathlib.Path, week: int,
                   params: Mapping[str, Any] | None = None) -> pathlib.Path:
        """Week ``week``'s full COCO dataset under ``store/week-<week>`` (idempotent); its path."""
        if week not in self.weeks:
            raise self.error(f"no week {week}: the generator knows weeks {sorted(self.weeks)}")
        params = dict(self.defaults if params is None else params)
        root = pathlib.Path(store) / f"week-{week}"
        wanted = {"week": week, "params": params, "change": dict(self.weeks[week]),
                  **({"holdout": True} if self.holdout else {})}
        try:
            if json.loads((root / WEEK_MARKER).read_text()) == wanted:
                return root
        except (OSError, ValueError):
            pass
        try:
            (root / "annotations").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self.error(f"cannot create {root}: {exc.strerror}") from None
        if week == 1:
            rng = random.Random(params["seed"])
            for split, key in (("train", "num_train"), ("val", "num_val")):
                coco = self.write_split(root / "images", split, params[key], rng, params)
                atomic_write_text(root / "annotations" / f"{split}.json", json.dumps(coco))
            if self.holdout:  # its own seed, so train and val stay the bytes they were
                coco = self.write_split(root / "images", "holdout", params["num_val"],
                                        random.Random(f"{params['seed']}:holdout"), params)
                atomic_write_text(root / "annotations" / "holdout.json", json.dumps(coco))
        else:
            self._next_week(self.write_week(store, week - 1, params), root, week, params)
        atomic_write_text(root / WEEK_MARKER, json.dumps(wanted, indent=2))
        return root

    def _next_week(self, before: pathlib.Path, root: pathlib.Path, week: int,
                   params: Mapping[str, Any]) -> None:
        change = self.weeks[week]
        retire = params["num_train"] * change["retire_32nds"] // 32
        add = params["num_train"] * change["add_32nds"] // 32
        for split in ("train", "val", "holdout") if self.holdout else ("train", "val"):
            coco = json.loads((before / "annotations" / f"{split}.json").read_text())
            if split != "train":  # unchanged, byte for byte: the same pinned file
                for entry in coco["images"]:
                    _link(before / "images" / entry["file_name"],
                          root / "images" / entry["file_name"])
                _link(before / "annotations" / f"{split}.json",
                      root / "annotations" / f"{split}.json")
                continue
            gone = {i["id"] for i in coco["images"][:retire]}
            coco["images"] = coco["images"][retire:]
            coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] not in gone]
            for entry in coco["images"]:
                _link(before / "images" / entry["file_name"], root / "images" / entry["file_name"])
            new = self.write_split(
                root / "images", split, add, random.Random(change["seed"]),
                dict(params, class_weights=change["class_weights"]), prefix=f"w{week}-",
                first_id=max(i["id"] for i in coco["images"]) + 1,
                first_ann=max(a["id"] for a in coco["annotations"]) + 1)
            if "swap" in change:  # label noise: a share of the new boxes of two classes
                _swap_labels(new["annotations"], change["swap"], change["swap_share"],
                             random.Random(f"{change['seed']}:swap"))
            coco["images"] += new["images"]
            coco["annotations"] += new["annotations"]
            coco["info"] = {"description": f"{self.describe}, {split}, week {week}"}
            atomic_write_text(root / "annotations" / f"{split}.json", json.dumps(coco))

    def main(self, argv: Sequence[str] | None, description: str) -> int:
        """The generator's command line: a dataset into --data-dir, or a week into --store."""
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--data-dir", default="data")
        parser.add_argument("--seed", type=int, default=self.defaults["seed"])
        parser.add_argument("--num-train", type=int, default=self.defaults["num_train"])
        parser.add_argument("--num-val", type=int, default=self.defaults["num_val"])
        parser.add_argument("--store", default=None, metavar="DIR",
                            help="write week --week's dataset into DIR/week-N (the pinned layout)")
        parser.add_argument("--week", type=int, default=1, help="which week (with --store)")
        args = parser.parse_args(argv)
        params = dict(self.defaults, seed=args.seed, num_train=args.num_train,
                      num_val=args.num_val)
        try:
            if args.store:
                print(self.write_week(args.store, args.week, params))
                return 0
            print(self.ensure_dataset(args.data_dir, params))
        except self.error as exc:
            print(f"error: {exc}", file=sys.stderr)
            return int(getattr(exc, "exit_code", ExitCode.BAD_INPUT))
        return 0


def module_names(generator: SyntheticCoco, name: str) -> Any:
    """A generator module's `__getattr__` (PEP 562): its public names resolved to the kit."""
    if name in _GENERATOR_NAMES:
        return getattr(generator, name)
    if name in _READER_NAMES:
        from modelkit import datasets

        return getattr(datasets, name)
    raise AttributeError(name)
