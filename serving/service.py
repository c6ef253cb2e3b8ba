"""The work behind one inference request, without HTTP.

`ModelService` turns a request body into a response body: parse, validate against the
model's real inputs, preprocess encoded images, run a predictor, decode detections,
serialise. Raw tensors get the model's outputs; one BYTES tensor of encoded images gets
detections and the answers' quality signals. Everything here runs on a predictor worker
thread (`PredictorPool.submit`). More: docs/inside-serving.md.
"""

import dataclasses
import functools
import io
from typing import Any, Callable

import numpy as np
import orjson
from PIL import Image

from serving import compat
from serving.errors import BadRequest, InferenceFailed, ModelDirError
from serving.modeldir import InferConfig, ModelDir, TensorSpec
from serving.postprocess import ROLES, decode_centernet, label_names
from serving.ppdet import PPDetImages, split_ppdet_batch
from serving.ppdet_config import PPDetConfig, ResizeOp
from serving.preprocess import Deadline, ImageOptions, check_count, prepare_images
from serving.protocol import (
    Tensor,
    datatype_to_numpy,
    encode_infer_response,
    encode_json,
    numpy_to_datatype,
    parse_infer_request,
)
from serving.quality import AnswerSignals, split_answers
from serving.runtime import PredictorPool

DETECTION_OUTPUTS = (
    TensorSpec("bbox", "FP32", (-1, 6)),
    TensorSpec("bbox_num", "INT32", (-1,)),
    TensorSpec("labels", "BYTES", (-1,)),
)
_PADDLE_DTYPES = {
    "FLOAT32": "FP32", "FLOAT64": "FP64", "FLOAT16": "FP16", "INT64": "INT64",
    "INT32": "INT32", "INT8": "INT8", "UINT8": "UINT8", "BOOL": "BOOL",
}


@dataclasses.dataclass
class Parsed:
    """A parsed request: its input tensors, and how its outputs become the answer
    (selection and serialisation, as the route asks: (body, binary header length))."""

    inputs: list[Tensor]
    finish: Callable[[list[Tensor]], tuple[bytes, int | None]]


def light_request(inputs: list[Tensor], max_elements: int) -> bool:
    """Whether a request's cost is known to be small before it runs: raw tensors of at
    most `max_elements` values together (what one warm-up inference fed the model;
    the cost of a convolutional network grows with its input's size). Encoded
    images never are: a few KB of PNG or JPEG may decode to 16 Mpx, so their cost is
    the sender's choice, whatever earlier requests cost."""
    if any(t.datatype == "BYTES" for t in inputs):
        return False
    return sum(int(t.data.size) for t in inputs) <= max_elements


@dataclasses.dataclass
class Result:
    """A serialised response, the time spent inside the predictor and the answer's
    quality signals (one per image; none for a raw-tensor request)."""

    body: bytes
    header_length: int | None  # set when binary outputs follow the JSON
    inference_seconds: float
    quality: tuple[AnswerSignals, ...] = ()


class ModelService:
    """One model version: its predictors, its signature and its request handling."""

    def __init__(self, model: ModelDir, name: str, version: str, pool: PredictorPool,
                 images: ImageOptions = ImageOptions()) -> None:
        self.model = model
        self.images = images
        self.name = name
        self.version = version
        self.pool = pool
        self.cfg = model.infer_cfg
        self.ppdet: PPDetImages | None = None
        self.roles: dict[str, int] = {}
        if isinstance(self.cfg, PPDetConfig):
            self.ppdet = PPDetImages(self.cfg, str(model.path), pool.input_names,
                                     pool.output_names)
            pool.set_splitter(split_ppdet_batch)  # batched boxes go back by bbox_num
            self.image_input = self.ppdet.image_input
        else:
            self.image_input = self.cfg.input.name or pool.input_names[0]
        self.inputs = [self._input_spec(n) for n in pool.input_names]
        declared = {spec.name: spec for spec in model.program_outputs}
        self.outputs = [declared.get(n, TensorSpec(n, "FP32", ())) for n in pool.output_names]
        if self.image_input not in pool.input_names:
            raise ModelDirError(
                f"infer_cfg.yml input.name {self.image_input!r} is not a model input "
                f"({', '.join(pool.input_names)})"
            )
        if self.ppdet is None:
            self.roles = self._output_roles()
        self.classes = frozenset(self.cfg.class_names())

    @functools.cached_property
    def light_elements(self) -> int:
        """A light request's most values (`light_request`): one warm-up inference's."""
        return sum(int(a.size) for a in self._warm_feeds().values())

    @functools.cached_property
    def light_body_bytes(self) -> int:
        """The largest body that may hold a light request (as JSON, at most ~25 bytes a
        value): a larger one is not parsed on the event loop to find out."""
        return 32 * self.light_elements + 64 * 1024

    def _example_cfg(self) -> InferConfig:
        """The example's `infer_cfg.yml` (what the CenterNet path reads)."""
        if not isinstance(self.cfg, InferConfig):
            raise TypeError("not the example's infer_cfg.yml format")
        return self.cfg

    def _input_spec(self, name: str) -> TensorSpec:
        spec = self.model.program_inputs.get(name)
        if spec is not None:
            return spec
        if self.ppdet is not None:
            return self.ppdet.default_spec(name)
        dtype = _PADDLE_DTYPES.get(self.pool.input_dtypes.get(name, "FLOAT32"), "FP32")
        return TensorSpec(name, dtype, (-1, 3, *self._example_cfg().input.size))

    def _output_roles(self) -> dict[str, int]:
        """Index of the heatmap/size/offset outputs among the predictor's outputs.

        `infer_cfg.yml` `outputs:` lists the roles, each with the exported tensor
        name; without tensor names the listed order is the predictor's order,
        and without the list the order is heatmap, size, offset.
        """
        names = self.pool.output_names
        cfg = self._example_cfg()
        roles: dict[str, int] = {}
        for position, entry in enumerate(cfg.outputs):
            if entry.name not in ROLES:
                continue
            if entry.tensor is not None and entry.tensor in names:
                roles[entry.name] = names.index(entry.tensor)
            elif entry.tensor is None and position < len(names):
                roles[entry.name] = position
            elif entry.name in names:
                roles[entry.name] = names.index(entry.name)
        if not cfg.outputs:
            roles = {role: i for i, role in enumerate(ROLES) if i < len(names)}
        missing = [r for r in ROLES if r not in roles]
        if missing:
            raise ModelDirError(
                f"{self.model.path}/infer_cfg.yml: outputs lack the decoder role(s) "
                f"{', '.join(missing)} (predictor outputs: {', '.join(names)})"
            )
        return roles

    # ---- metadata ---------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        """The OIP model metadata document (with the fault drill, when one is declared)."""
        doc: dict[str, Any] = {
            "name": self.name,
            "versions": [self.version],
            "platform": "paddle_inference",
            "inputs": [_spec_doc(s) for s in self.inputs],
            "outputs": [_spec_doc(s) for s in self.outputs],
            "parameters": {
                "labels": self.cfg.labels_doc(),
                "image_input": {
                    "datatype": "BYTES",
                    "shape": [-1],
                    "encoding": "base64 PNG/JPEG in JSON, raw bytes with binary_data",
                    "outputs": [_spec_doc(s) for s in DETECTION_OUTPUTS],
                },
            },
        }
        if isinstance(self.cfg, PPDetConfig):  # how the images become the three inputs
            doc["parameters"]["image_input"]["preprocess"] = [
                op.model_dump() for op in self.cfg.preprocess
            ]
            doc["parameters"]["image_input"]["format"] = f"PaddleDetection ({self.cfg.arch})"
        fault = self.cfg.fault
        if fault is not None and fault.active:  # tells a caller why this version misbehaves
            doc["parameters"]["fault_drill"] = fault.model_dump()
        return doc

    # ---- inference ----------------------------------------------------------------

    def infer_body(self, body: bytes, header_length: str | None = None) -> Result:
        """OIP infer: request body -> response body (runs on a worker thread)."""
        return self.answer(self.parse_infer(body, header_length))

    def compat_body(self, body: bytes) -> Result:
        """Paddle Serving `GeneralModelService/inference`: body -> body."""
        return self.answer(self.parse_compat(body))

    def parse_infer(self, body: bytes, header_length: str | None = None) -> Parsed:
        """An OIP infer body, parsed (the first half of `infer_body`)."""
        request = parse_infer_request(body, header_length)

        def finish(outputs: list[Tensor]) -> tuple[bytes, int | None]:
            outputs = _select(outputs, request.outputs)
            binary = set(request.binary_outputs)
            if request.binary_default and request.outputs is None:
                binary = {t.name for t in outputs}
            return encode_infer_response(self.name, self.version, outputs, request.id, binary)

        return Parsed(request.inputs, finish)

    def parse_compat(self, body: bytes) -> Parsed:
        """A Paddle Serving body, parsed (the first half of `compat_body`)."""
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from None
        request = compat.parse_compat_request(doc)

        def finish(outputs: list[Tensor]) -> tuple[bytes, int | None]:
            outputs = _select(outputs, request.fetch)
            return encode_json(compat.encode_compat_response(request, outputs)), None

        return Parsed(request.inputs, finish)

    def answer(self, parsed: Parsed) -> Result:
        """A parsed request -> its response body (the second half of `infer_body`)."""
        outputs, seconds, quality = self.run_tensors(parsed.inputs)
        body, header_length = parsed.finish(outputs)
        return Result(body, header_length, seconds, quality)

    def light(self, parsed: Parsed) -> bool:
        """`light_request` for this model (`light_elements`)."""
        return light_request(parsed.inputs, self.light_elements)

    def run_tensors(
        self, inputs: list[Tensor]
    ) -> tuple[list[Tensor], float, tuple[AnswerSignals, ...]]:
        """Validated inputs -> (output tensors, predictor seconds, quality signals);
        the image form or the raw form (no signals)."""
        if len(inputs) == 1 and inputs[0].datatype == "BYTES":
            return self.detect(inputs[0])
        feeds = self._validate_raw(inputs)
        arrays, seconds = self.pool.infer(feeds)
        outputs = [
            Tensor(spec.name, numpy_to_datatype(a.dtype), tuple(a.shape), a)
            for spec, a in zip(self.outputs, arrays)
        ]
        return outputs, seconds, ()

    def detect(self, images: Tensor) -> tuple[list[Tensor], float, tuple[AnswerSignals, ...]]:
        """Encoded images -> detections (`bbox`, `bbox_num`, `labels`) and their signals."""
        if images.data.size == 0:
            raise BadRequest(f"input '{images.name}': no images")
        encoded = list(images.data.reshape(-1))
        check_count(len(encoded), images.name)
        deadline = Deadline(self.images.decode_timeout)

        def between_steps() -> None:  # stop a request nobody waits for, or one overdue
            self.pool.raise_if_abandoned()
            deadline.check()

        options = self.images
        if self.ppdet is not None:
            ready = self.ppdet.prepare(encoded, images.name, between_steps,
                                       options.max_request_pixels, options.reduced_decode)
            arrays, seconds = self.pool.infer(ready.feeds)
            bbox, counts = self.ppdet.detections(arrays, len(encoded))
            stats = ready.stats
        else:
            prepared = prepare_images(encoded, self._example_cfg().input, images.name,
                                      between_steps, options.max_request_pixels,
                                      options.reduced_decode)
            arrays, seconds = self.pool.infer({self.image_input: prepared.batch})
            bbox, counts = self.decode(arrays, prepared.sizes)
            stats = prepared.stats
        names = label_names(bbox, self.cfg.label_names())
        quality = split_answers(bbox, counts, names, self.classes, stats,
                                self.cfg.draw_threshold)
        return [
            Tensor("bbox", "FP32", tuple(bbox.shape), bbox),
            Tensor("bbox_num", "INT32", tuple(counts.shape), counts),
            Tensor("labels", "BYTES", (len(names),), names),
        ], seconds, quality

    def decode(
        self, arrays: list[np.ndarray], original_hw: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Raw predictor outputs -> (`bbox`, `bbox_num`) (the example's CenterNet heads)."""
        heatmap, size, offset = (arrays[self.roles[r]] for r in ROLES)
        cfg = self._example_cfg()
        try:
            return decode_centernet(
                heatmap, size, offset, cfg.decode, cfg.input.size,
                cfg.category_ids() or None, original_hw,
            )
        except (ValueError, IndexError) as exc:
            raise InferenceFailed(f"decoding the model's outputs failed: {exc}") from exc

    def _validate_raw(self, inputs: list[Tensor]) -> dict[str, np.ndarray]:
        expected = {s.name: s for s in self.inputs}
        feeds: dict[str, np.ndarray] = {}
        for tensor in inputs:
            spec = expected.get(tensor.name)
            if spec is None:
                raise BadRequest(
                    f"unknown input '{tensor.name}'; the model takes "
                    f"{', '.join(expected)} (or one BYTES tensor of encoded images)"
                )
            if tensor.datatype != spec.datatype:
                raise BadRequest(
                    f"input '{tensor.name}': datatype {tensor.datatype}, "
                    f"the model expects {spec.datatype}"
                )
            if 0 in tensor.shape:  # Paddle's answer was "inference failed: std::exception"
                raise BadRequest(
                    f"input '{tensor.name}': shape {list(tensor.shape)} has a zero "
                    "dimension: there is nothing to infer on")
            if not _shape_fits(tensor.shape, spec.shape):
                raise BadRequest(
                    f"input '{tensor.name}': shape {list(tensor.shape)} does not fit "
                    f"the model's {list(spec.shape)} (-1 = any)"
                )
            feeds[tensor.name] = tensor.data
        missing = [n for n in expected if n not in feeds]
        if missing:
            raise BadRequest(f"missing input(s): {', '.join(missing)}")
        if self.ppdet is not None:
            check_batch_agrees(feeds)
        return feeds

    def warm_up(self) -> list[np.ndarray]:
        """One inference per predictor on a zero input of the model's input size
        (a PaddleDetection export: a black image through its preprocessing)."""
        return self.pool.warm_up(self._warm_feeds())

    def warm_up_here(self) -> None:
        """One such inference on the calling thread's own predictor (the event loop's,
        which runs short requests inline when nothing else is in flight)."""
        self.pool.run_here(self._warm_feeds())

    def answer_sample(self) -> None:
        """Answer one request as a client sends it: a generated mid-gray PNG of the
        version's input size through its own decode, preprocessing, predictor and
        postprocessing (`detect`). Raises what a client's request would meet.

        The per-predictor `warm_up` feeds the model's *declared* input shape, so a
        version whose `infer_cfg.yml` resizes to a size the graph cannot take (an
        input spec of 128x128, a resize to 32x32) warmed up fine and then failed every
        request; Triton's `model_warmup` sends a sample request for the same reason."""
        height, width = self._sample_size()
        buffer = io.BytesIO()
        Image.new("RGB", (width, height), (128, 128, 128)).save(buffer, format="PNG")
        data = np.empty(1, dtype=object)
        data[0] = buffer.getvalue()
        self.detect(Tensor(self.image_input, "BYTES", (1,), data))

    def _sample_size(self) -> tuple[int, int]:
        """(height, width) of a sample image: what the version's preprocessing expects."""
        if self.ppdet is not None:
            resize = [op for op in self.ppdet.cfg.preprocess if isinstance(op, ResizeOp)]
            return resize[0].target_size if resize else (64, 64)
        size = self._example_cfg().input.size
        return int(size[0]), int(size[1])

    def _warm_feeds(self) -> dict[str, np.ndarray]:
        if self.ppdet is not None:
            return dict(self.ppdet.warm_up_feeds())
        size = self._example_cfg().input.size
        return {
            spec.name: np.zeros(_concrete_shape(spec.shape, size), datatype_to_numpy(spec.datatype))
            for spec in self.inputs
        }


def _concrete_shape(shape: tuple[int, ...], size: tuple[int, int]) -> list[int]:
    """A batch-of-one shape for a declared one: -1 -> 1, NCHW spatial -1 -> input size."""
    if not shape:
        return [1, 3, *size]
    out = list(shape)
    if len(out) == 4:
        out[2] = size[0] if out[2] == -1 else out[2]
        out[3] = size[1] if out[3] == -1 else out[3]
    return [max(d, 1) for d in out]


def _spec_doc(spec: TensorSpec) -> dict[str, Any]:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}


def _shape_fits(shape: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    if not expected:
        return True
    if len(shape) != len(expected):
        return False
    if shape and shape[0] == 0:
        return False  # an empty batch is a malformed request, not an inference
    return all(e == -1 or e == s for s, e in zip(shape, expected))


def check_batch_agrees(feeds: dict[str, np.ndarray]) -> None:
    """`BadRequest` naming the inputs when their batch sizes (first dimensions) differ.

    A PaddleDetection export takes one `im_shape` and one `scale_factor` row per image
    (upstream `create_inputs`); each input was checked against its own spec only, and
    a batch of 1 with 2 rows reached Paddle's `yolo_box` and failed there (500: "Input(ImgSize)
    dim[0] and Input(X) dim[0] should be same"), which a canary counts as the model's
    error."""
    sizes = {name: int(array.shape[0]) for name, array in feeds.items() if array.ndim}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"'{name}' {size}" for name, size in sizes.items())
        raise BadRequest(f"inputs disagree on the batch size (first dimension): {listed}; "
                         "each image takes one row of every other input")


def _select(outputs: list[Tensor], names: list[str] | None) -> list[Tensor]:
    if names is None:
        return outputs
    by_name = {t.name: t for t in outputs}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise BadRequest(
            f"unknown output(s) {', '.join(unknown)}; available: {', '.join(by_name)}"
        )
    return [by_name[n] for n in names]
