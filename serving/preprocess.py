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
from typing import Callable

import numpy as np
from PIL import Image, UnidentifiedImageError

from serving.errors import BadRequest
from serving.modeldir import InputConfig
from serving.quality import InputStats, input_stats

# Pillow refuses images above ~89 Mpx with a warning and above ~179 Mpx with
# an error; a detector on 128 px inputs has no use for anything near that.
MAX_PIXELS = 4096 * 4096
#: Images one request may carry, and the pixels all of them together: decoding is the
#: cost a client controls (1,000 1x1 PNGs took 920 MB and 2.7 s; 20 4096^2 1-bit PNGs,
#: 56 KB on the wire, 2 s). Both are checked from the headers, before any decoding.
MAX_IMAGES = 32
MAX_REQUEST_PIXELS = 4 * 1024 * 1024
#: What a detector's clients send; every other format Pillow knows is refused unread.
FORMATS = ("PNG", "JPEG")


def decode_image(data: bytes, what: str, budget: int = MAX_PIXELS) -> Image.Image:
    """Decode one PNG or JPEG of at most `budget` pixels; `BadRequest` naming `what`."""
    image = open_image(data, what, budget)
    try:
        image.load()
    except (OSError, ValueError, Image.DecompressionBombError):
        raise BadRequest(f"{what}: not a decodable PNG or JPEG image") from None
    return image


def open_image(data: bytes, what: str, budget: int = MAX_PIXELS) -> Image.Image:
    """One PNG or JPEG of at most `budget` pixels, its header read and nothing decoded
    yet (another decoder may take it from here); `BadRequest` naming `what`."""
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise BadRequest(f"{what}: not a decodable PNG or JPEG image") from None
    if image.width * image.height > min(MAX_PIXELS, budget):
        raise BadRequest(f"{what}: {image.width}x{image.height} image is too large "
                         f"(at most {MAX_REQUEST_PIXELS} pixels per request)")
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

    `before_each` runs before each image is decoded (the server stops an
    abandoned request there by raising)."""
    prepared = prepare_images(images, cfg, tensor_name, before_each)
    return prepared.batch, prepared.sizes


def prepare_images(
    images: list[bytes], cfg: InputConfig, tensor_name: str = "image",
    before_each: Callable[[], None] = lambda: None,
) -> Prepared:
    """`preprocess_images`, plus each image's `InputStats` (what the server uses)."""
    height, width = cfg.size
    mean = np.asarray(cfg.mean, dtype=np.float32).reshape(3, 1, 1)
    std = np.asarray(cfg.std, dtype=np.float32).reshape(3, 1, 1)
    if len(images) > MAX_IMAGES:
        raise BadRequest(f"input '{tensor_name}': {len(images)} images; at most {MAX_IMAGES} "
                         "per request")
    batch = np.empty((len(images), 3, height, width), dtype=np.float32)
    sizes = np.empty((len(images), 2), dtype=np.float32)
    stats = []
    budget = MAX_REQUEST_PIXELS
    for i, data in enumerate(images):
        before_each()
        image = decode_image(data, f"input '{tensor_name}' element {i}", budget)
        budget -= image.width * image.height
        sizes[i] = (image.height, image.width)
        decoded_width, decoded_height = image.width, image.height
        image = image.convert("RGB")
        if image.size != (width, height):
            image = image.resize((width, height), Image.Resampling.BILINEAR)
        pixels = np.asarray(image, dtype=np.float32)
        # On the resized array (a fixed cost per image; a resize keeps the mean).
        stats.append(input_stats(pixels, decoded_width, decoded_height))
        if cfg.channel_order == "BGR":
            pixels = pixels[:, :, ::-1]
        chw = pixels.transpose(2, 0, 1) * np.float32(cfg.scale)
        batch[i] = (chw - mean) / std
    return Prepared(batch, sizes, stats)
