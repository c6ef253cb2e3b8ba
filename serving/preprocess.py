"""Encoded image bytes -> the model's input tensor, as `infer_cfg.yml` says.

Decode (PNG/JPEG via Pillow), convert to RGB (or BGR), resize to the input
size with bilinear filtering when it differs, scale to 0..1, subtract the
mean and divide by the std, and lay out as NCHW float32. The original sizes
are returned too, so boxes can be mapped back to the caller's pixels.
"""

import io

import numpy as np
from PIL import Image, UnidentifiedImageError

from serving.errors import BadRequest
from serving.modeldir import InputConfig

# Pillow refuses images above ~89 Mpx with a warning and above ~179 Mpx with
# an error; a detector on 128 px inputs has no use for anything near that.
MAX_PIXELS = 4096 * 4096


def decode_image(data: bytes, what: str) -> Image.Image:
    """Decode one encoded image; `BadRequest` naming `what` if it is not one."""
    try:
        image = Image.open(io.BytesIO(data))
        if image.width * image.height > MAX_PIXELS:
            raise BadRequest(f"{what}: {image.width}x{image.height} image is too large")
        image.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        raise BadRequest(f"{what}: not a decodable PNG or JPEG image") from None
    return image


def preprocess_images(
    images: list[bytes], cfg: InputConfig, tensor_name: str = "image"
) -> tuple[np.ndarray, np.ndarray]:
    """Batch of encoded images -> (NCHW float32 tensor, [N, 2] original (height, width))."""
    height, width = cfg.size
    mean = np.asarray(cfg.mean, dtype=np.float32).reshape(3, 1, 1)
    std = np.asarray(cfg.std, dtype=np.float32).reshape(3, 1, 1)
    batch = np.empty((len(images), 3, height, width), dtype=np.float32)
    sizes = np.empty((len(images), 2), dtype=np.float32)
    for i, data in enumerate(images):
        image = decode_image(data, f"input '{tensor_name}' element {i}")
        sizes[i] = (image.height, image.width)
        image = image.convert("RGB")
        if image.size != (width, height):
            image = image.resize((width, height), Image.Resampling.BILINEAR)
        pixels = np.asarray(image, dtype=np.float32)
        if cfg.channel_order == "BGR":
            pixels = pixels[:, :, ::-1]
        chw = pixels.transpose(2, 0, 1) * np.float32(cfg.scale)
        batch[i] = (chw - mean) / std
    return batch, sizes
