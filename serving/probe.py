"""The probe set a version ships (`contracts.artifact.PROBE_DIR`), as the server hands it out.

The canary's paired answers check (`promotion/decision/answers.py`) sends the same real
images to stable and canary. In a cluster the controller has no models volume,
so the stable version's own server serves its probe set:
`GET /v2/models/{model}/versions/{version}/probe` (not part of the Open
Inference Protocol; an extension like the Paddle Serving route) answers
`{"model_name", "model_version", "images": [{"name", "data"}]}` with each
file's bytes in base64, the encoding an OIP JSON BYTES tensor takes, so the
controller forwards them unchanged. A version that ships none answers 404
saying so. Read once at start-up: the export is immutable.
"""

from __future__ import annotations

import base64
import pathlib

from contracts.artifact import PROBE_DIR, PROBE_MAX_BYTES, PROBE_MAX_IMAGES

__all__ = ["IMAGE_SUFFIXES", "load_probe_set"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def load_probe_set(model_dir: pathlib.Path) -> list[dict[str, str]]:
    """`[{"name", "data"}]` of `<model_dir>/probe/*.{png,jpg,jpeg}` in name order, the
    first `PROBE_MAX_IMAGES` and at most `PROBE_MAX_BYTES` in all (empty: none shipped).
    Symbolic links are not followed: the set is what the export holds."""
    root = pathlib.Path(model_dir) / PROBE_DIR
    if not root.is_dir() or root.is_symlink():
        return []
    out: list[dict[str, str]] = []
    total = 0
    for path in sorted(root.iterdir()):
        if path.is_symlink() or not path.is_file() or path.suffix.lower() not in IMAGE_SUFFIXES:
            continue
        data = path.read_bytes()
        if total + len(data) > PROBE_MAX_BYTES or len(out) >= PROBE_MAX_IMAGES:
            break
        total += len(data)
        out.append({"name": path.name, "data": base64.b64encode(data).decode("ascii")})
    return out
