"""The paired answers probe: the stable's probe images, answered by stable and canary. Thin I/O.

One pass (`HttpProbe.answers`) through the router clients use, each request pinned to a
version (`x-mlops-version`) and its subset (`x-mlops-subset`): fetch the stable's probe
images, send them to each version in one `infer` request, and turn each answer into
boxes per image (`boxes_from_response`, pure) for `promotion/decision/answers.py`. Any
failure is a `ProbeError` naming the version and the URL. Why: docs/inside-promotion.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Protocol

import requests

from contracts.traffic import CANARY, STABLE, SUBSET_HEADER, VERSION_HEADER
from promotion.decision.answers import Box
from promotion.errors import ProbeError

__all__ = ["AnswersProbe", "HttpProbe", "boxes_from_response"]

Answers = tuple[list[list[Box]], list[list[Box]]]


class AnswersProbe(Protocol):
    """Both versions' boxes on the stable's probe images, in the same image order."""

    def answers(self, model: str, stable: str, canary: str) -> Answers:
        """`ProbeError` when it cannot be made."""
        ...


def boxes_from_response(doc: Mapping[str, Any], images: int) -> list[list[Box]]:
    """Boxes per image from an OIP JSON detection response (pure): `bbox` [M, 6] rows of
    (class id, score, x1, y1, x2, y2), `bbox_num` [N] rows per image, `labels` [M]."""
    outputs = {o.get("name"): o for o in doc.get("outputs") or [] if isinstance(o, Mapping)}
    missing = [n for n in ("bbox", "bbox_num", "labels") if n not in outputs]
    if missing:
        raise ProbeError(f"the answer has no {', '.join(missing)} output (a detector's "
                         f"answer has bbox, bbox_num and labels)")
    flat = [float(v) for v in outputs["bbox"].get("data") or []]
    counts = [int(v) for v in outputs["bbox_num"].get("data") or []]
    labels = [str(v) for v in outputs["labels"].get("data") or []]
    if len(counts) != images or sum(counts) * 6 != len(flat) or len(labels) != sum(counts):
        raise ProbeError(f"the answer's bbox ({len(flat) // 6} rows), bbox_num ({counts}) and "
                         f"labels ({len(labels)}) do not fit {images} images")
    out, row = [], 0
    for n in counts:
        out.append([Box(labels[row + i], *flat[(row + i) * 6 + 1:(row + i) * 6 + 6])
                    for i in range(n)])
        row += n
    return out


@dataclasses.dataclass
class HttpProbe:
    """Probes through the router at `router_url(model)` (None: the model is not routed)."""

    router_url: Callable[[str], str | None]
    timeout: float = 30.0

    def _get(self, url: str, version: str, subset: str, **kwargs: Any) -> Mapping[str, Any]:
        headers = {VERSION_HEADER: version, SUBSET_HEADER: subset}
        try:
            if "json" in kwargs:
                response = requests.post(url, headers=headers, timeout=self.timeout, **kwargs)
            else:
                response = requests.get(url, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise ProbeError(f"{version}: {url}: {type(exc).__name__}") from None
        try:
            doc = response.json()
        except ValueError:
            doc = {}
        if response.status_code != 200:
            why = doc.get("error") if isinstance(doc, dict) else None
            raise ProbeError(f"{version}: {url} answered {response.status_code}"
                             f"{f': {why}' if why else ''}", lasting=response.status_code == 404)
        if not isinstance(doc, dict):
            raise ProbeError(f"{version}: {url} answered no JSON object")
        return doc

    def answers(self, model: str, stable: str, canary: str) -> Answers:
        base = self.router_url(model)
        if not base:
            raise ProbeError(f"{model} has no router address yet")
        root = f"{base.rstrip('/')}/v2/models/{model}/versions"
        images = self._get(f"{root}/{stable}/probe", stable, STABLE).get("images") or []
        data = [i.get("data") for i in images if isinstance(i, Mapping)]
        if not data or not all(isinstance(d, str) for d in data):
            raise ProbeError(f"{stable}: its probe set is empty")
        body = {"inputs": [{"name": "image_bytes", "datatype": "BYTES",
                            "shape": [len(data)], "data": data}]}
        out = []
        for version, subset in ((stable, STABLE), (canary, CANARY)):
            doc = self._get(f"{root}/{version}/infer", version, subset, json=body)
            try:
                out.append(boxes_from_response(doc, len(data)))
            except ProbeError as exc:
                raise ProbeError(f"{version}: {exc}") from None
        return out[0], out[1]
