"""Attacks from the second adversarial review (issue 26, findings 2, 4 and 5), and the
photos users really send, against real servers.

* Finding 2: a progressive JPEG whose one 12-byte AC scan repeats thousands of times
  decodes for seconds (each scan is a pass over the whole image); refused from its
  scan count before decoding, on the Pillow path (the example's format) and the
  OpenCV path (a PaddleDetection export).
* Finding 4: an integer wider than 64 bits anywhere in a JSON body, and a tensor with
  a zero spatial dimension, were 500s (the canary's "model errors").
* Finding 5: every BYTES element was base64-decoded before the 32-image cap.
* A 12 MP phone photo (4000x3000 JPEG) was a 400 from an undocumented 4 Mpx cap.

And from the fourth (issue 41):

* Finding 2: the same bomb with an APP2 "MPF" segment (Pillow: an MPO) or a junk byte
  between two segments was decoded, on both paths.
* Finding 7: an output named again was serialised again (a 245 KB request, a 64 MB
  answer), on the OIP route and on Paddle Serving's.
* Finding 8: a PaddleDetection export's inputs with different batch sizes were a 500.

A real `mlops serve` on the tiny exported detector and on a PaddleDetection-format
export; the bomb is made here from a Pillow progressive JPEG by repeating one scan.
"""

from __future__ import annotations

import base64
import io
import json
import re
import struct

import numpy as np
import pytest
import requests
from PIL import Image

from serving.errors import BadRequest
from serving.modeldir import InputConfig
from serving.options import ServingOptions
from serving.ppdet_config import PPDetConfig, ResizeOp
from serving.preprocess import (
    MAX_JPEG_SCANS,
    Deadline,
    jpeg_scans,
    open_image,
    prepare_images,
)
from serving.protocol import parse_infer_request
from tests.fixtures.serving import served
from tests.ppdet_export import infer_cfg

MODEL = "tiny-detector"


def _scans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each SOS segment with its entropy-coded data."""
    pos, out = 2, []
    while pos < len(data) and data[pos + 1] != 0xD9:
        end = pos + 2 + struct.unpack(">H", data[pos + 2:pos + 4])[0]
        if data[pos + 1] == 0xDA:  # the scan runs to the next marker that is not RSTn/stuffing
            while not (data[end] == 0xFF and data[end + 1] != 0
                       and not 0xD0 <= data[end + 1] <= 0xD7):
                end += 1
            out.append((pos, end))
        pos = end
    return out


def scan_bomb(side: int = 64, repeats: int = 2 * MAX_JPEG_SCANS) -> bytes:
    """A valid progressive JPEG whose smallest AC scan is repeated `repeats` more times
    (libjpeg warns and decodes on: each repeat is one more pass over the image)."""
    out = io.BytesIO()
    Image.new("RGB", (side, side), (120, 130, 140)).save(out, "JPEG", progressive=True)
    data = out.getvalue()
    scans = _scans(data)
    start, end = min(scans[1:], key=lambda s: s[1] - s[0])
    last = scans[-1][1]
    return data[:last] + data[start:end] * repeats + data[last:]


def with_mpf(jpeg: bytes) -> bytes:
    """`jpeg` with an APP2 "MPF" segment (CIPA DC-007 Multi-Picture Format) declaring two
    images, as a camera's MPO or a phone's JPEG with a gain map carries one: Pillow then
    opens it as an `MpoImageFile`, whose format is "MPO" (issue 41, finding 2). The
    segment is what Pillow reads (python-pillow/Pillow: src/PIL/JpegImagePlugin.py
    `jpeg_factory`, an MPO when NumberOfImages > 1; src/PIL/MpoImagePlugin.py): a TIFF
    header, an IFD with MPFVersion, NumberOfImages (2) and MPEntry, and two 16-byte
    entries (the first image's, then one more)."""
    entries_at = 8 + 2 + 3 * 12 + 4  # after the TIFF header and the IFD
    ifd = struct.pack("<H", 3)
    ifd += struct.pack("<HHI4s", 0xB000, 7, 4, b"0100")  # MPFVersion
    ifd += struct.pack("<HHII", 0xB001, 4, 1, 2)  # NumberOfImages
    ifd += struct.pack("<HHII", 0xB002, 7, 32, entries_at)  # MPEntry
    ifd += struct.pack("<I", 0)  # no next IFD
    entries = struct.pack("<IIIHH", 0x20030000, 0, 0, 0, 0) * 2
    payload = b"MPF\x00" + b"II*\x00" + struct.pack("<I", 8) + ifd + entries
    return jpeg[:2] + b"\xff\xe2" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def with_junk(jpeg: bytes) -> bytes:
    """`jpeg` with one junk byte after its first segment: libjpeg warns ("Corrupt JPEG
    data: 1 extraneous bytes before marker", libjpeg-turbo jdmarker.c `next_marker`)
    and Pillow skips it ("Skip non-0xFF junk", JpegImagePlugin.py `_open`); both decode
    on."""
    first_end = 4 + struct.unpack(">H", jpeg[4:6])[0]
    return jpeg[:first_end] + b"\x00" + jpeg[first_end:]


def _jpeg(size, progressive=False, quality=90) -> bytes:
    out = io.BytesIO()
    rng = np.random.default_rng(0)
    small = Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8))
    small.resize(size, Image.Resampling.BILINEAR).save(out, "JPEG", quality=quality,
                                                      progressive=progressive)
    return out.getvalue()


def _images(*encoded: bytes, name="image_bytes") -> bytes:
    return json.dumps({"inputs": [{"name": name, "shape": [len(encoded)], "datatype": "BYTES",
                                   "data": [base64.b64encode(e).decode() for e in encoded]}]
                      }).encode()


def _post(server, body, path=None):
    url = f"{server.url}{path or f'/v2/models/{server.model_name}/infer'}"
    return requests.post(url, data=body, headers={"Content-Type": "application/json"},
                         timeout=60)


def _count(server, code: str) -> float:
    text = requests.get(f"{server.url}/metrics", timeout=5).text
    return sum(float(m) for m in re.findall(
        rf'model_requests_total{{[^}}]*status_code="{code}"[^}}]*}} ([0-9.e+]+)', text))


# ---- finding 2: the scan bomb ----------------------------------------------------------

def test_scans_are_counted_without_decoding():
    assert jpeg_scans(_jpeg((64, 48))) == 1  # baseline, three components interleaved
    assert jpeg_scans(_jpeg((64, 48), progressive=True)) == 10  # libjpeg's standard script
    assert jpeg_scans(scan_bomb(repeats=500)) == 510


def test_the_scan_count_cannot_be_hidden():
    """Issue 41, finding 2, and what the same review of the code found beside it: the
    count was skipped when Pillow called the image "MPO", and the walk over the segments
    before the first scan, by their lengths, counted nothing once a junk byte or an RST
    marker (which libjpeg takes without a length) stood between two segments. Every FF
    DA is now counted, on the raw bytes: an over-count (here an EXIF segment's) is the
    price, and a real photo stays far below the limit."""
    bomb = scan_bomb(repeats=500)
    first_end = 4 + struct.unpack(">H", bomb[4:6])[0]
    hidden = {
        "mpo": with_mpf(bomb),
        "junk": with_junk(bomb),
        "rst": bomb[:first_end] + b"\xff\xd0" + bomb[first_end:],
    }
    assert Image.open(io.BytesIO(hidden["mpo"])).format == "MPO"
    for how, data in hidden.items():
        assert jpeg_scans(data) >= 510, how
        with pytest.raises(BadRequest, match=r"JPEG with \d+ scans"):
            open_image(data, f"the {how} bomb")
    plain = _jpeg((64, 48))
    payload = b"Exif\x00\x00" + b"\xff\xda" * 3
    app1 = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    assert jpeg_scans(plain[:2] + app1 + plain[2:]) == 4  # over-counted, never under
    open_image(with_mpf(_jpeg((64, 48), progressive=True)), "an MPO photo")  # still served


@pytest.fixture(scope="module")
def tiny_server(tiny_model_dir, tmp_path_factory):
    with served(tiny_model_dir, "--threads", "1",
                log_dir=tmp_path_factory.mktemp("limits-tiny")) as running:
        yield running


@pytest.fixture(scope="module")
def ppdet_server(ppdet_model_dir, tmp_path_factory):
    with served(ppdet_model_dir, "--threads", "1",
                log_dir=tmp_path_factory.mktemp("limits-ppdet")) as running:
        yield running


@pytest.mark.parametrize("which", ["tiny_server", "ppdet_server"])
def test_an_mpo_scan_bomb_is_refused_on_both_decoders(which, request):
    """Issue 41, finding 2: the bomb with an APP2 "MPF" segment was answered 200 by
    Pillow's path (format "MPO" skipped the count) and by OpenCV's (the count ran only
    when Pillow said "JPEG"); so was the bomb with a junk byte. An MPO photo is served
    (a phone's JPEG with a gain map is one), as its first image."""
    server = request.getfixturevalue(which)
    image_input = "image_bytes" if which == "tiny_server" else "image"
    for bomb in (with_mpf(scan_bomb()), with_junk(scan_bomb())):
        r = _post(server, _images(bomb, name=image_input))
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert f"{10 + 2 * MAX_JPEG_SCANS} scans" in error and "element 0" in error, error
    photo = with_mpf(_jpeg((64, 48), progressive=True))
    fine = _post(server, _images(photo, name=image_input))
    assert fine.status_code == 200, fine.text
    assert _count(server, "500") == 0


@pytest.mark.parametrize("which", ["tiny_server", "ppdet_server"])
def test_a_progressive_jpeg_scan_bomb_is_refused_before_decoding(which, request):
    """Finding 2, on Pillow's decoder and on OpenCV's (a 2048x2048 bomb of 200,000
    repeats took ~20 s to decode; this one is small, but has too many scans)."""
    server = request.getfixturevalue(which)
    image_input = "image_bytes" if which == "tiny_server" else "image"
    r = _post(server, _images(scan_bomb(), name=image_input))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert f"{10 + 2 * MAX_JPEG_SCANS} scans" in error and "element 0" in error
    fine = _post(server, _images(_jpeg((64, 48), progressive=True), name=image_input))
    assert fine.status_code == 200, fine.text
    assert _count(server, "500") == 0


def test_each_image_is_decoded_within_the_requests_deadline():
    """The scan limit bounds one decode; the deadline bounds the request, checked
    before and after each image (a decode in C cannot be stopped halfway). A clock
    that advances 1 s a reading: the third check finds 2.5 s passed."""
    ticks = iter(range(100))
    deadline = Deadline(2.5, clock=lambda: float(next(ticks)))
    cfg = InputConfig(size=(16, 16))
    with pytest.raises(BadRequest, match=r"took more than 2.5 s"):
        prepare_images([_jpeg((32, 32))] * 4, cfg, "image_bytes", deadline.check)


# ---- finding 4: what used to be a 500 ---------------------------------------------------

def test_integers_wider_than_64_bits_are_the_clients_error(tiny_server):
    big = 2 ** 70
    bodies = [
        {"id": big, "inputs": [{"name": "image", "shape": [1], "datatype": "FP32",
                                "data": [1.0]}]},
        {"inputs": [{"name": "image", "shape": [big], "datatype": "FP32", "data": [1.0]}]},
        {"inputs": [{"name": "image", "shape": [1], "datatype": "INT64", "data": [big]}]},
    ]
    for doc in bodies:
        r = _post(tiny_server, json.dumps(doc).encode())
        assert r.status_code == 400, (doc, r.text)
    # in FP32 data it is a number like any other (JSON has no integer type): answered
    as_float = {"inputs": [{"name": "image", "shape": [1, 3, 128, 128], "datatype": "FP32",
                            "data": [big] + [0.5] * (3 * 128 * 128 - 1)}]}
    assert _post(tiny_server, json.dumps(as_float).encode()).status_code == 200
    compat = json.dumps({"feed": [{"image": [big]}], "log_id": big}).encode()
    assert _post(tiny_server, compat, "/GeneralModelService/inference").status_code == 400
    assert _count(tiny_server, "500") == 0


def test_a_tensor_with_a_zero_dimension_is_the_clients_error(tiny_server):
    for shape in ([1, 3, 0, 128], [1, 3, 128, 0], [1, 0, 128, 128]):
        doc = {"inputs": [{"name": "image", "shape": shape, "datatype": "FP32", "data": []}]}
        r = _post(tiny_server, json.dumps(doc).encode())
        assert r.status_code == 400 and "zero dimension" in r.json()["error"], r.text
    compat = {"tensor": [{"name": "image", "elem_type": 1, "shape": [1, 3, 0, 4],
                          "float_data": []}]}
    r = _post(tiny_server, json.dumps(compat).encode(), "/GeneralModelService/inference")
    assert r.status_code == 400, r.text
    assert _count(tiny_server, "500") == 0


# ---- finding 5: the image cap comes before the base64 decoding ---------------------------

def test_bytes_elements_are_counted_before_any_is_decoded():
    """33 elements whose last is not base64: the count is refused, not the element
    (which would mean all 33 were decoded first)."""
    data = ["aGk="] * 32 + ["not base64!"]
    body = json.dumps({"inputs": [{"name": "image_bytes", "shape": [33], "datatype": "BYTES",
                                   "data": data}]}).encode()
    with pytest.raises(BadRequest, match="33 images; at most 32"):
        parse_infer_request(body)


def test_a_million_bytes_elements_are_refused_by_their_count(tiny_server):
    data = ["aGk="] * 1_150_000  # just under the 8 MB body limit, as the review sent
    body = json.dumps({"inputs": [{"name": "image_bytes", "shape": [len(data)],
                                   "datatype": "BYTES", "data": data}]},
                      separators=(",", ":")).encode()
    before = tiny_server.rss_bytes()
    r = _post(tiny_server, body)
    assert r.status_code == 400 and "at most 32" in r.json()["error"], r.text
    compat = json.dumps({"feed": [{"image": "aGk="}] * 40}).encode()
    r = _post(tiny_server, compat, "/GeneralModelService/inference")
    assert r.status_code == 400 and "at most 32" in r.json()["error"], r.text
    assert tiny_server.rss_bytes() - before < 200 * 1024 * 1024
    assert _count(tiny_server, "500") == 0


# ---- photos as users take them ------------------------------------------------------------

PHOTO = (4000, 3000)  # a 12 MP phone photo


@pytest.fixture(scope="module")
def photo() -> bytes:
    return _jpeg(PHOTO, quality=80)


@pytest.mark.parametrize("which", ["tiny_server", "ppdet_server"])
def test_a_12_megapixel_photo_is_served(which, request, photo):
    server = request.getfixturevalue(which)
    image_input = "image_bytes" if which == "tiny_server" else "image"
    r = _post(server, _images(photo, name=image_input))
    assert r.status_code == 200, r.text
    two = _post(server, _images(photo, photo, name=image_input))
    assert two.status_code == 400, two.text
    error = two.json()["error"]
    # the second photo is fine on its own: the message says it is the request's budget
    assert "element 1" in error and "left of its pixel budget" in error, error


def test_the_request_pixel_budget_is_a_flag(model_server, tiny_model_dir, photo):
    server = model_server(tiny_model_dir, "--max-request-pixels", str(2 ** 20))
    r = _post(server, _images(photo))
    assert r.status_code == 400, r.text
    assert "at most 1048576 pixels per request" in r.json()["error"]
    assert _post(server, _images(_jpeg((1024, 1024)))).status_code == 200


def test_reduced_decode_keeps_the_geometry_and_changes_pixels_a_little(photo):
    """`--reduced-decode`, the example's format: the JPEG is decoded at 1/8 scale (still
    larger than the 128x128 input), the original size is kept for the boxes, and the
    input tensor moves little (normalised units; a pixel step is 1/255/0.25 = 0.016)."""
    cfg = InputConfig(size=(128, 128), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    full = prepare_images([photo], cfg)
    reduced = prepare_images([photo], cfg, reduced_decode=True)
    assert reduced.sizes.tolist() == full.sizes.tolist() == [[3000, 4000]]
    assert reduced.stats[0].pixels == full.stats[0].pixels == 4000 * 3000
    diff = np.abs(reduced.batch - full.batch)
    assert 0 < diff.mean() < 0.05, diff.mean()


def test_reduced_decode_of_a_paddledetection_export_keeps_upstreams_inputs(photo):
    """The PaddleDetection path (`cv2.IMREAD_REDUCED_COLOR_*`): the largest DCT scale that
    leaves the image at least the first Resize's output; `im_shape` and `scale_factor`
    (what moves the boxes) exactly as from the full decode."""
    # lazy (collection cost): it pulls opencv
    from serving.ppdet import PPDetImages, reduction

    op = ResizeOp(type="Resize", target_size=[96, 128], keep_ratio=False, interp=2)
    assert reduction(op, 3000, 4000) == 8
    assert reduction(op, 200, 300) == 2 and reduction(op, 120, 160) == 1
    keep = ResizeOp(type="Resize", target_size=[640, 640], keep_ratio=True, interp=2)
    assert reduction(keep, 3000, 4000) == 4  # 750x1000 still covers 480x640
    images = PPDetImages(PPDetConfig.model_validate(infer_cfg()), "x",
                         ["image", "im_shape", "scale_factor"], ["bbox", "bbox_num"])
    full = images.prepare([photo]).feeds
    reduced = images.prepare([photo], reduced_decode=True).feeds
    assert reduced["image"].shape == full["image"].shape
    assert reduced["im_shape"].tolist() == full["im_shape"].tolist()
    assert reduced["scale_factor"].tolist() == full["scale_factor"].tolist()
    diff = np.abs(reduced["image"] - full["image"])
    assert 0 < diff.mean() < 0.05, diff.mean()


def test_fields_of_the_wrong_json_type_are_the_clients_error(tiny_server):
    """What the request fuzzing (`tests/serving/test_serving_fuzz.py`) found: a dict where a
    datatype or elem_type belongs was unhashable (500), a number where a list of names
    belongs was not iterable (500), an integer outside INT64 overflowed numpy (500)."""
    oip = {"inputs": [{"name": "image", "shape": [1], "datatype": {"a": 1}, "data": [1]}]}
    assert _post(tiny_server, json.dumps(oip).encode()).status_code == 400
    serving = "/GeneralModelService/inference"
    for tensor in ({"name": "image", "elem_type": [1], "shape": [1], "float_data": [1.0]},
                   {"name": "image", "elem_type": 0, "shape": [1], "int64_data": [2 ** 64]}):
        r = _post(tiny_server, json.dumps({"tensor": [tensor]}).encode(), serving)
        assert r.status_code == 400, r.text
    fetch = {"tensor": [{"name": "image", "elem_type": 1, "shape": [1], "float_data": [1.0]}],
             "fetch_var_names": 5}
    assert _post(tiny_server, json.dumps(fetch).encode(), serving).status_code == 400
    assert _count(tiny_server, "500") == 0


def test_the_image_options_travel_in_infer_cfg_to_the_deployments_flags():
    """`serving:` in infer_cfg.yml -> the `mlops serve` flags the Deployment passes."""

    options = ServingOptions.model_validate({"max_request_pixels": 4000 * 3000,
                                             "reduced_decode": True})
    assert options.args() == ["--max-request-pixels", "12000000", "--reduced-decode"]
    assert ServingOptions(reduced_decode=False).args() == ["--no-reduced-decode"]
    with pytest.raises(ValueError):
        ServingOptions.model_validate({"max_request_pixels": 0})


# ---- issue 41, finding 7: an output asked for twice ------------------------------------

def test_an_output_asked_for_twice_is_refused_naming_the_field(tiny_server):
    """Each repeat was one more copy of the tensor in the answer: 245 KB of a request
    made 64 MB of answer. Now 400, naming the field and both places, on every route."""
    x = np.zeros((1, 3, 128, 128), np.float32).reshape(-1).tolist()
    oip = {"inputs": [{"name": "image", "shape": [1, 3, 128, 128], "datatype": "FP32",
                       "data": x}],
           "outputs": [{"name": "fetch_name_0"}, {"name": "fetch_name_1"},
                       {"name": "fetch_name_0"}]}
    r = _post(tiny_server, json.dumps(oip).encode())
    assert r.status_code == 400, r.text[:300]
    assert "outputs[2]" in r.json()["error"] and "outputs[0]" in r.json()["error"]
    serving = "/GeneralModelService/inference"
    tensor = {"tensor": [{"name": "image", "elem_type": 1, "shape": [1, 3, 128, 128],
                          "float_data": x}],
              "fetch_var_names": ["fetch_name_1", "fetch_name_1"]}
    r = _post(tiny_server, json.dumps(tensor).encode(), serving)
    assert r.status_code == 400, r.text[:300]
    assert "fetch_var_names[1]" in r.json()["error"]
    png = io.BytesIO()
    Image.new("RGB", (16, 16)).save(png, "PNG")
    feed = {"feed": [{"image": base64.b64encode(png.getvalue()).decode()}],
            "fetch": ["bbox", "labels", "bbox"]}
    r = _post(tiny_server, json.dumps(feed).encode(), serving)
    assert r.status_code == 400 and "fetch[2]" in r.json()["error"], r.text[:300]
    oip["outputs"] = oip["outputs"][:2]  # each once: answered
    assert _post(tiny_server, json.dumps(oip).encode()).status_code == 200
    assert _count(tiny_server, "500") == 0


# ---- issue 41, finding 8: a PaddleDetection export's batch sizes -----------------------

def _ppdet_inputs(images: int, im_shapes: int, scale_factors: int) -> list[dict]:
    image = np.random.default_rng(0).random((images, 3, 32, 32), np.float32)
    return [
        {"name": "image", "shape": list(image.shape), "datatype": "FP32",
         "data": image.reshape(-1).tolist()},
        {"name": "im_shape", "shape": [im_shapes, 2], "datatype": "FP32",
         "data": [32.0, 32.0] * im_shapes},
        {"name": "scale_factor", "shape": [scale_factors, 2], "datatype": "FP32",
         "data": [1.0, 1.0] * scale_factors},
    ]


@pytest.mark.parametrize("sizes", [(1, 2, 1), (2, 1, 1), (1, 1, 2), (2, 1, 2)])
def test_paddledetection_inputs_must_agree_on_the_batch_size(ppdet_server, sizes):
    """Each input was checked against its own spec only; Paddle's `yolo_box` then failed
    (500, counted as the model's error by a canary), or (2, 1, 2) was answered with
    boxes for an image that had no `im_shape`. Now 400 naming each input's batch size,
    on the OIP route and Paddle Serving's tensor form."""
    r = _post(ppdet_server, json.dumps({"inputs": _ppdet_inputs(*sizes)}).encode())
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    for name, size in zip(("image", "im_shape", "scale_factor"), sizes):
        assert f"'{name}' {size}" in error, error
    tensors = [{"name": t["name"], "elem_type": 1, "shape": t["shape"],
                "float_data": t["data"]} for t in _ppdet_inputs(*sizes)]
    r = _post(ppdet_server, json.dumps({"tensor": tensors}).encode(),
              "/GeneralModelService/inference")
    assert r.status_code == 400 and "batch size" in r.json()["error"], r.text[:300]
    agreed = _post(ppdet_server, json.dumps({"inputs": _ppdet_inputs(2, 2, 2)}).encode())
    assert agreed.status_code == 200, agreed.text[:300]
    assert _count(ppdet_server, "500") == 0
