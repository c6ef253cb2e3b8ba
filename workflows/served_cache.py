"""Served detections kept by what decides them, so an unchanged export is not run again.

An entry, `<root>/served/<key>.json`, holds an export's COCO results on an image set,
keyed by a digest of what decides them: the export's files as the server reads them,
the images, and how they are run (the batch, the serving code, the Paddle release). The
root is the data cache (`$MLOPS_DATA_CACHE`); writes are atomic and past `MAX_ENTRIES`
the least recently used go. Why: docs/inside-workflows.md.
"""

import hashlib
import importlib.metadata
import json
import os
import pathlib
from typing import Any, Mapping

import pydantic
import yaml

from cogs.files import atomic_write_text
from contracts.artifact import LOCK_FILE
from serving.fault import FaultConfig
from workflows import served

CACHE_ENV = "MLOPS_DATA_CACHE"
SUBDIR = "served"
MAX_ENTRIES = 64  # production's and a few candidates' on two sets, with room to spare
RECORD = "model.yaml"  # contracts.artifact's record: lineage and metrics, not read to infer
LINEAGE = (RECORD, LOCK_FILE)  # neither is read to infer (`datalock.json`: data_lineage)
INFER_CFG = "infer_cfg.yml"

_SERVING_CODE = pathlib.Path(served.__file__).resolve().parents[1] / "serving"


def _code_digest() -> str:
    code = hashlib.sha256()
    for path in [*sorted(_SERVING_CODE.glob("*.py")), pathlib.Path(served.__file__)]:
        code.update(path.name.encode() + b"\0" + path.read_bytes())
    try:
        code.update(importlib.metadata.version("paddlepaddle").encode())
    except importlib.metadata.PackageNotFoundError:
        code.update(b"no paddlepaddle distribution")
    return code.hexdigest()


def _served_content(path: pathlib.Path) -> bytes:
    """A file's bytes; `infer_cfg.yml`'s parsed content without a `fault:` section that
    validates (an invalid one stays in: the export is then run, and refused, as before)."""
    raw = path.read_bytes()
    if path.name != INFER_CFG:
        return raw
    try:
        doc = yaml.safe_load(raw)
        if isinstance(doc, dict) and "fault" in doc:
            FaultConfig.model_validate(doc["fault"])
            doc = {k: v for k, v in doc.items() if k != "fault"}
    except (yaml.YAMLError, pydantic.ValidationError):
        return raw
    return b"parsed infer_cfg\0" + yaml.safe_dump(doc, sort_keys=True).encode()


def export_digest(model_dir: pathlib.Path) -> str:
    """sha256 over the export's files (names and content) but its lineage and its drill."""
    digest = hashlib.sha256()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file() and p.name not in LINEAGE):
        digest.update(str(path.relative_to(model_dir)).encode() + b"\0")
        digest.update(hashlib.sha256(_served_content(path)).digest())
    return digest.hexdigest()


def images_digest(ground_truth: Mapping[str, Any], image_root: pathlib.Path) -> str | None:
    """sha256 over the image list, the categories and every image's bytes; None when an
    image cannot be read (the run itself then says which)."""
    digest = hashlib.sha256(json.dumps([ground_truth["images"], ground_truth["categories"]],
                                       sort_keys=True).encode())
    for image in ground_truth["images"]:
        try:
            digest.update(hashlib.sha256((image_root / str(image["file_name"])).read_bytes())
                          .digest())
        except OSError:
            return None
    return digest.hexdigest()


class ServedCache:
    """`<root>/served/`: one JSON file per (export, images, serving) key."""

    def __init__(self, root: pathlib.Path, max_entries: int = MAX_ENTRIES) -> None:
        self.dir = pathlib.Path(root) / SUBDIR
        self.max_entries = max_entries
        self._code = _code_digest()

    @classmethod
    def from_env(cls) -> "ServedCache | None":
        """The cache under `$MLOPS_DATA_CACHE`, or None when it is not set."""
        root = os.environ.get(CACHE_ENV)
        return cls(pathlib.Path(root)) if root else None

    def key(self, export: str, images: str) -> str:
        """The entry's name for an export digest and an images digest."""
        inputs = {"export": export, "images": images, "batch": served.BATCH, "code": self._code}
        return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> str | None:
        """The detections' JSON text stored under `key`, or None (absent or unreadable)."""
        path = self.dir / f"{key}.json"
        try:
            text = path.read_text()
            json.loads(text)
            os.utime(path)  # used: the last to go
        except (OSError, ValueError):
            return None
        return text

    def put(self, key: str, text: str) -> None:
        """Store the detections' JSON text; a full or read-only cache only costs a rerun."""
        try:
            atomic_write_text(self.dir / f"{key}.json", text)
            self._prune()
        except OSError:
            pass

    def _prune(self) -> None:
        """Remove the least recently used entries past `max_entries`."""
        def used(path: pathlib.Path) -> float:
            try:
                return path.stat().st_mtime
            except OSError:  # removed meanwhile by a concurrent run
                return 0.0

        entries = sorted(self.dir.glob("*.json"), key=used, reverse=True)
        for stale in entries[self.max_entries:]:
            stale.unlink(missing_ok=True)


class CachedExport:
    """An export's detections per image set: from the cache when its key is there, else
    through a `ServedExport` opened on first need (its predictor costs ~0.5 s) and
    stored. Close it (or use it in a `with`)."""

    def __init__(self, model_dir: pathlib.Path, what: str, cache: ServedCache | None) -> None:
        self.model_dir, self.what, self.cache = model_dir, what, cache
        self._export: served.ServedExport | None = None
        self._digest: str | None = None

    def __enter__(self) -> "CachedExport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the served export's predictor, if one was made."""
        if self._export is not None:
            self._export.close()
            self._export = None

    def detections_json(self, ground_truth: Mapping[str, Any], image_root: pathlib.Path) -> str:
        """The COCO results list on `ground_truth`'s images, as JSON text."""
        key = None
        if self.cache is not None:
            images = images_digest(ground_truth, image_root)
            if images is not None:
                if self._digest is None:
                    self._digest = export_digest(self.model_dir)
                key = self.cache.key(self._digest, images)
                cached = self.cache.get(key)
                if cached is not None:
                    print(f"{self.what}: detections on {len(ground_truth['images'])} images read "
                          f"from {self.cache.dir} ({key[:12]}): this export ran on them before",
                          flush=True)
                    return cached
        if self._export is None:
            self._export = served.ServedExport(self.model_dir, self.what)
        text = json.dumps(self._export.detections(ground_truth, image_root))
        if key is not None and self.cache is not None:
            self.cache.put(key, text)
        return text
