"""Encoded image bytes -> the model's input tensor, as `infer_cfg.yml` says.

Decode (PNG/JPEG via Pillow), convert to RGB (or BGR), resize to the input
size with bilinear filtering when it differs, scale to 0..1, subtract the
mean and divide by the std, and lay out as NCHW float32. The original sizes
are returned too, so boxes can be mapped back to the caller's pixels, and
(`prepare_images`) each image's input stats for the quality metrics, taken
from the pixel array already in hand (`serving.quality.input_stats`).
"""

import dataclasses
import io
import time
from typing import Callable

import numpy as np
from PIL import Image, JpegImagePlugin, UnidentifiedImageError

from serving.errors import BadRequest
from serving.modeldir import InputConfig
from serving.protocol import MAX_IMAGES
from serving.quality import InputStats, input_stats

# Pillow refuses images above ~89 Mpx with a warning and above ~179 Mpx with
# an error; a detector on 128 px inputs has no use for anything near that.
MAX_PIXELS = 4096 * 4096
#: The pixels all images of one request may decode to, by default (`mlops serve
#: --max-request-pixels`): a 12 MP phone photo (4000x3000) fits, as one image; 20 4096^2
#: 1-bit PNGs (56 KB on the wire, 2 s to decode) do not. Checked from the headers.
MAX_REQUEST_PIXELS = 16 * 1024 * 1024
#: Scans a JPEG may have. Each scan of a progressive JPEG is a pass over the whole
#: image however few bytes it has: one 12-byte AC scan repeated 200,000 times made a
#: 2.4 MB 2048x2048 JPEG that took ~31 s to decode (0.06 s with its 10 scans;
#: benchmarks/results/scan_bomb.json). libjpeg's standard progression has 10 scans (6
#: for grayscale), a baseline JPEG 1 to 4; at ~0.16 ms a repeated scan of 4 Mpx, 64
#: scans cost ~10 ms more there, ~30 ms on a 12 MP photo.
MAX_JPEG_SCANS = 64
#: Seconds one request's images may take to decode and prepare (`mlops serve
#: --decode-timeout`): checked before and after each image, since a decode in C cannot
#: be stopped halfway. The scan and pixel limits bound each decode; this bounds the
#: request, whatever it holds (the costliest valid one took ~1 s here).
DECODE_TIMEOUT = 5.0
#: What a detector's clients send; every other format Pillow knows is refused unread.
FORMATS = ("PNG", "JPEG")



@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """How the server decodes one request's encoded images (the `mlops serve` flags)."""

    max_request_pixels: int = MAX_REQUEST_PIXELS
    decode_timeout: float = DECODE_TIMEOUT
    #: Decode a JPEG at a reduced DCT scale when the model's resize shrinks it anyway.
    reduced_decode: bool = False


_SOI = b"\xff\xd8"
_SOS = b"\xff\xda"


def jpeg_scans(data: bytes) -> int:
    """How many scans (SOS markers, FF DA) a JPEG may have: every FF DA in its bytes,
    counted without parsing or decoding anything.

    An over-count, never an under-count, whatever the bytes say. Entropy-coded data
    stuffs every FF with 00 (ITU T.81 B.1.1.5), so a real scan is always counted; what
    else counts is FF DA inside a segment (an EXIF thumbnail's own scans, by chance in
    an ICC profile) and whatever follows the first image (an MPO's other frames, a
    trailing file), a few at most in a real photo. Walking the segments by their
    lengths instead, to skip those, was bypassed: libjpeg and Pillow skip junk bytes
    between segments and take RSTn/TEM before the first scan without a length, where
    such a walk lost its way and counted nothing (a 2,010-scan bomb with one junk byte
    after APP0 counted 0 and decoded)."""
    return data.count(_SOS)


def check_jpeg_scans(data: bytes, what: str) -> None:
    """`BadRequest` naming `what` when `data` has more than `MAX_JPEG_SCANS` scans."""
    scans = jpeg_scans(data)
    if scans > MAX_JPEG_SCANS:
        raise BadRequest(f"{what}: JPEG with {scans} scans; at most {MAX_JPEG_SCANS} "
                         "(each scan is a pass over the whole image)")


class Deadline:
    """The time one request's images have to be decoded and prepared."""

    def __init__(self, seconds: float = DECODE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.start = clock()

    def check(self) -> None:
        """`BadRequest` once the time is up (an abandoned slot, not a model error)."""
        if self.clock() - self.start > self.seconds:
            raise BadRequest(f"decoding the request's images took more than "
                             f"{self.seconds:g} s: send fewer or smaller images")


class PixelBudget:
    """What the images of one request may still decode to, in pixels."""

    def __init__(self, total: int = MAX_REQUEST_PIXELS) -> None:
        self.total = total
        self.left = total

    def take(self, width: int, height: int, what: str) -> None:
        """Count one image's pixels; `BadRequest` naming `what` and which limit it passed."""
        pixels = width * height
        if pixels > min(MAX_PIXELS, self.total):
            limit = min(MAX_PIXELS, self.total)
            unit = "per image" if limit == MAX_PIXELS else "per request"
            raise BadRequest(f"{what}: {width}x{height} image is too large "
                             f"(at most {limit} pixels {unit})")
        if pixels > self.left:
            raise BadRequest(
                f"{what}: {width}x{height} image is more than the request has left of its "
                f"pixel budget ({self.left} of {self.total}; the earlier images took "
                f"{self.total - self.left}): send it in another request")
        self.left -= pixels


def decode_image(data: bytes, what: str, budget: PixelBudget | None = None,
                 draft: tuple[int, int] | None = None) -> Image.Image:
    """Decode one PNG or JPEG within `budget`; `BadRequest` naming `what`.

    `draft` (width, height): a JPEG may be decoded at 1/2, 1/4 or 1/8 scale (libjpeg's
    DCT scaling, Pillow's `draft`) as long as it stays at least that large; the
    image's `size` is then the reduced one (`open_image` has the sent one)."""
    return load_image(open_image(data, what, budget), what, draft)


def load_image(image: Image.Image, what: str,
               draft: tuple[int, int] | None = None) -> Image.Image:
    """Decode an image `open_image` returned (see `decode_image`)."""
    if draft is not None and is_jpeg(image):
        image.draft("RGB", draft)
    try:
        image.load()
    except (OSError, ValueError, Image.DecompressionBombError):
        raise BadRequest(f"{what}: not a decodable PNG or JPEG image") from None
    return image


def open_image(data: bytes, what: str, budget: PixelBudget | None = None) -> Image.Image:
    """One PNG or JPEG, its header read and nothing decoded yet (another decoder may
    take it from here), its pixels taken from `budget` (None: a request of its own);
    `BadRequest` naming `what`."""
    # The scans first, on the raw bytes, for anything that starts as a JPEG: what Pillow's
    # JPEG plugin opens (an MPO too) and what OpenCV's decoder takes (the PaddleDetection
    # path) both start with SOI. An MPO's format is "MPO", not "JPEG": checking the
    # format let a scan bomb with an APP2 "MPF" segment through.
    if data.startswith(_SOI):
        check_jpeg_scans(data, what)
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise BadRequest(f"{what}: not a decodable PNG or JPEG image") from None
    if is_jpeg(image):  # whatever it starts with (Pillow's plugin wants SOI today)
        check_jpeg_scans(data, what)
    (budget or PixelBudget()).take(image.width, image.height, what)
    return image


def is_jpeg(image: Image.Image) -> bool:
    """Opened by Pillow's JPEG plugin: a JPEG, or an MPO (a JPEG with an APP2 "MPF"
    segment; its `format` says "MPO", and it decodes as its first JPEG)."""
    return isinstance(image, JpegImagePlugin.JpegImageFile)


@dataclasses.dataclass
class Prepared:
    """A batch of encoded images made ready for the model."""

    batch: np.ndarray  # NCHW float32, normalised
    sizes: np.ndarray  # [N, 2] original (height, width)
    stats: list[InputStats]  # per image, before normalisation


def preprocess_images(
    images: list[bytes], cfg: InputConfig, tensor_name: str = "image",
    before_each: Callable[[], None] = lambda: None,
) -> tuple[np.ndarray, np.ndarray]:
    """Batch of encoded images -> (NCHW float32 tensor, [N, 2] original (height, width)).

    `before_each` runs before each image is decoded and again after (the server stops
    an abandoned or overdue request there by raising)."""
    prepared = prepare_images(images, cfg, tensor_name, before_each)
    return prepared.batch, prepared.sizes


def prepare_images(
    images: list[bytes], cfg: InputConfig, tensor_name: str = "image",
    before_each: Callable[[], None] = lambda: None,
    max_pixels: int = MAX_REQUEST_PIXELS, reduced_decode: bool = False,
) -> Prepared:
    """`preprocess_images`, plus each image's `InputStats` (what the server uses).

    `reduced_decode`: a JPEG larger than the input size is decoded at the smallest
    DCT scale (1/2, 1/4, 1/8) that is still at least the input size, then resized
    as usual (the answers differ a little: serving/README.md, Large photos)."""
    height, width = cfg.size
    mean = np.asarray(cfg.mean, dtype=np.float32).reshape(3, 1, 1)
    std = np.asarray(cfg.std, dtype=np.float32).reshape(3, 1, 1)
    check_count(len(images), tensor_name)
    batch = np.empty((len(images), 3, height, width), dtype=np.float32)
    sizes = np.empty((len(images), 2), dtype=np.float32)
    stats = []
    budget = PixelBudget(max_pixels)
    for i, data in enumerate(images):
        before_each()
        what = f"input '{tensor_name}' element {i}"
        image = open_image(data, what, budget)
        original_width, original_height = image.size
        image = load_image(image, what, (width, height) if reduced_decode else None)
        before_each()
        sizes[i] = (original_height, original_width)
        image = image.convert("RGB")
        if image.size != (width, height):
            image = image.resize((width, height), Image.Resampling.BILINEAR)
        pixels = np.asarray(image, dtype=np.float32)
        # On the resized array (a fixed cost per image; a resize keeps the mean).
        stats.append(input_stats(pixels, original_width, original_height))
        if cfg.channel_order == "BGR":
            pixels = pixels[:, :, ::-1]
        chw = pixels.transpose(2, 0, 1) * np.float32(cfg.scale)
        batch[i] = (chw - mean) / std
    return Prepared(batch, sizes, stats)


def check_count(count: int, tensor_name: str) -> None:
    """`BadRequest` when one request carries more than `MAX_IMAGES` images."""
    if count > MAX_IMAGES:
        raise BadRequest(f"input '{tensor_name}': {count} images; at most {MAX_IMAGES} "
                         "per request")
