"""A small OIP v2 client on `requests`: health, metadata, infer.

Numpy arrays go out as tensors (datatype from the dtype, see
`protocol.numpy_to_datatype`) and come back as arrays of the right dtype
and shape; encoded images go out as one BYTES tensor and come back as
detections. By default tensors travel with the binary extension (no float
text to format or parse on either side); `binary=False` sends plain JSON.

Retries are bounded and only where a retry can help: a connection that
could not be made (the server is starting or restarting) and 503 (not
ready or at its in-flight limit). A 4xx is the caller's to fix and a 500
would fail again, so both raise at once with the server's message.
"""

import base64
import dataclasses
import time
from typing import Any, Mapping, Sequence

import numpy as np
import orjson
import requests
import urllib3

from contracts.errors import ExitCode, MlopsError
from serving.errors import ServingError
from serving.protocol import (
    HEADER_LENGTH,
    Tensor,
    binary_to_array,
    datatype_to_numpy,
    numpy_to_datatype,
    tensor_to_binary,
)


class ClientError(MlopsError):
    """The server answered with an error status (or could not be reached)."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclasses.dataclass(frozen=True)
class Detection:
    """One detected object, in the pixels of the image that was sent."""

    category_id: int
    label: str
    score: float
    box: tuple[float, float, float, float]  # x1, y1, x2, y2


class ModelClient:
    """Client for one model on one server."""

    def __init__(
        self,
        url: str,
        model: str,
        version: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
        session: requests.Session | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.version = version
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.session = session or requests.Session()

    # ---- plumbing ---------------------------------------------------------------

    def _model_path(self) -> str:
        path = f"{self.url}/v2/models/{self.model}"
        return f"{path}/versions/{self.version}" if self.version else path

    def _request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """Send with bounded retries on connect errors and 503 only."""
        kwargs.setdefault("timeout", self.timeout)
        attempt = 0
        while True:
            try:
                response = self.session.request(method, url, **kwargs)
            except requests.ConnectionError as exc:
                if attempt >= self.retries or not _is_connect_error(exc):
                    raise ClientError(f"{method} {url}: cannot connect: {exc}") from exc
            else:
                if response.status_code != 503 or attempt >= self.retries:
                    return response
            time.sleep(self.backoff * (2 ** attempt))
            attempt += 1

    @staticmethod
    def _raise_for_status(response: requests.Response) -> None:
        if response.status_code < 400:
            return
        try:
            message = response.json().get("error", response.text)
        except ValueError:
            message = response.text
        raise ClientError(
            f"{response.request.method} {response.url}: HTTP {response.status_code}: {message}",
            response.status_code,
        )

    # ---- health and metadata --------------------------------------------------------

    def live(self) -> bool:
        """True if the server process answers."""
        try:
            return self.session.get(f"{self.url}/v2/health/live", timeout=self.timeout).ok
        except requests.RequestException:
            return False

    def ready(self) -> bool:
        """True if the model is loaded and warmed up (no retries: a probe)."""
        try:
            return self.session.get(f"{self.url}/v2/health/ready", timeout=self.timeout).ok
        except requests.RequestException:
            return False

    def wait_ready(self, timeout: float = 60.0, interval: float = 0.2) -> None:
        """Poll readiness until true; `ClientError` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise ClientError(f"{self.url} not ready after {timeout:.0f} s")
            time.sleep(interval)

    def metadata(self) -> dict[str, Any]:
        """The model's OIP metadata (names, datatypes, shapes of inputs and outputs)."""
        response = self._request("GET", self._model_path())
        self._raise_for_status(response)
        return dict(response.json())

    # ---- inference --------------------------------------------------------------------

    def infer(
        self,
        inputs: Mapping[str, np.ndarray] | bytes | Sequence[bytes],
        outputs: Sequence[str] | None = None,
        binary: bool = True,
        request_id: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Run inference; returns output name -> array.

        `inputs` is either a mapping of input name to numpy array (the raw
        form), or the bytes of one or more encoded images (the detection
        form, answered with `bbox`, `bbox_num` and `labels`).
        """
        if isinstance(inputs, (bytes, bytearray)):
            tensors = [_bytes_tensor([bytes(inputs)])]
        elif isinstance(inputs, Mapping):
            tensors = [_to_tensor(name, array) for name, array in inputs.items()]
        else:
            tensors = [_bytes_tensor([bytes(b) for b in inputs])]
        body, header_length = encode_request(tensors, outputs, binary, request_id)
        headers = {
            "Content-Type": "application/octet-stream" if header_length else "application/json"
        }
        if header_length is not None:
            headers["Inference-Header-Content-Length"] = str(header_length)
        response = self._request("POST", f"{self._model_path()}/infer", data=body, headers=headers)
        self._raise_for_status(response)
        return decode_response(response.content, response.headers.get(HEADER_LENGTH))

    def detect(self, image: bytes) -> list[Detection]:
        """Detections for one encoded image."""
        out = self.infer(image)
        return [
            Detection(
                int(row[0]),
                label.decode("utf-8"),
                float(row[1]),
                tuple(float(v) for v in row[2:6]),  # type: ignore[arg-type]
            )
            for row, label in zip(out["bbox"], out["labels"])
        ]


def _is_connect_error(exc: requests.ConnectionError) -> bool:
    """True when no connection was made, so the request never reached the server."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def _to_tensor(name: str, array: np.ndarray) -> Tensor:
    array = np.asarray(array)
    datatype = numpy_to_datatype(array.dtype)
    if datatype == "BYTES":
        flat = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in array.reshape(-1)]
        data = np.empty(len(flat), dtype=object)
        data[:] = flat
        return Tensor(name, "BYTES", tuple(array.shape), data.reshape(array.shape))
    return Tensor(name, datatype, tuple(array.shape), array)


def _bytes_tensor(images: list[bytes], name: str = "image_bytes") -> Tensor:
    data = np.empty(len(images), dtype=object)
    data[:] = images
    return Tensor(name, "BYTES", (len(images),), data)


def encode_request(
    tensors: list[Tensor],
    outputs: Sequence[str] | None = None,
    binary: bool = True,
    request_id: str | None = None,
) -> tuple[bytes, int | None]:
    """An OIP infer body; with `binary`, tensors follow the JSON header raw.

    Returns (body, header length or None). Shared by the client, the load
    generator and the benchmark.
    """
    doc: dict[str, Any] = {}
    if request_id is not None:
        doc["id"] = request_id
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for t in tensors:
        entry: dict[str, Any] = {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
        if binary:
            blob = tensor_to_binary(t)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif t.datatype == "BYTES":
            entry["data"] = [base64.b64encode(v).decode("ascii") for v in t.data.reshape(-1)]
        else:
            entry["data"] = np.ascontiguousarray(t.data).reshape(-1)
        entries.append(entry)
    doc["inputs"] = entries
    if outputs is not None:
        doc["outputs"] = [{"name": n, "parameters": {"binary_data": binary}} for n in outputs]
    elif binary:
        doc["parameters"] = {"binary_data_output": True}
    header = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not binary:
        return header, None
    return header + b"".join(blobs), len(header)


def decode_response(body: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    """Output name -> numpy array, from a JSON or binary-extension response."""
    length = int(header_length) if header_length is not None else len(body)
    doc = orjson.loads(body[:length])
    offset = length
    result: dict[str, np.ndarray] = {}
    for out in doc.get("outputs", []):
        shape = tuple(out["shape"])
        datatype = out["datatype"]
        size = (out.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            chunk = body[offset:offset + size]
            offset += size
            try:
                array = binary_to_array(out["name"], datatype, int(np.prod(shape)), chunk)
            except ServingError as exc:
                raise ClientError(f"malformed response: {exc.message}") from None
        elif datatype == "BYTES":
            array = np.empty(len(out["data"]), dtype=object)
            array[:] = [s.encode("utf-8") if isinstance(s, str) else s for s in out["data"]]
        else:
            array = np.asarray(out["data"], dtype=datatype_to_numpy(datatype))
        result[out["name"]] = array.reshape(shape)
    return result
