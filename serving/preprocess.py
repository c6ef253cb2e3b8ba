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
from PIL import Image, UnidentifiedImageError

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


_SOS = b"\xff\xda"


def jpeg_scans(data: bytes) -> int:
    """How many scans (SOS markers) a JPEG has, counted without decoding it.

    The marker segments before the first scan are walked by their lengths (an
    EXIF thumbnail or an ICC profile may hold the bytes FF DA); from the first
    scan on, FF DA can only be a marker, since entropy-coded data stuffs every
    FF with 00 (ITU T.81 B.1.1.5). Whatever follows counts too, so a trailing
    second image counts against the limit: an over-count, never an under-count."""
    pos = 2  # after SOI
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return 0  # not a marker where one must be: the decoder will refuse it
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0xDA:
            return data.count(_SOS, pos)
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return 0


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
    if draft is not None and image.format == "JPEG":
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
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise BadRequest(f"{what}: not a decodable PNG or JPEG image") from None
    (budget or PixelBudget()).take(image.width, image.height, what)
    if image.format == "JPEG":
        scans = jpeg_scans(data)
        if scans > MAX_JPEG_SCANS:
            raise BadRequest(f"{what}: JPEG with {scans} scans; at most {MAX_JPEG_SCANS} "
                             "(each scan is a pass over the whole image)")
    return image


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
