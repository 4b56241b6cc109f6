"""One image file to the dataset's pixels: what ingest does to every image and serving to every file it is sent.

Both call these two functions with the ``Preprocessing`` record ingest wrote into the artifact's metadata, so a
served image is converted exactly as the training images were.
"""

from __future__ import annotations

import io

import numpy as np

from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.records import Preprocessing

FORMATS = ("PNG", "JPEG", "BMP", "GIF", "WEBP")  # Pillow's names of the formats a source's images may have
EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
NO_RESIZE = "none"
_GRAY_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F")


def is_image_name(name: str) -> bool:
    """Whether a file's name says it is one of the image formats a source may hold."""
    return name.lower().endswith(EXTENSIONS)


def decode(data: bytes, name: str) -> np.ndarray:
    """The pixels of an image file as uint8 [h, w, 1] (grayscale) or [h, w, 3] (colour); a GIF's first frame.

    Alpha is dropped and a palette expanded. ``name`` starts the one line a file that is not a readable
    image raises.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as image:
            image.load()  # decode now: a truncated file fails here, not later
            gray = image.mode in _GRAY_MODES or (image.mode == "P" and _gray_palette(image))
            converted = image.convert("L" if gray else "RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise BakeoffError(f"{name}: not a readable image ({error}): replace or remove the file") from None
    pixels = np.asarray(converted, dtype=np.uint8)
    return pixels[..., np.newaxis] if pixels.ndim == 2 else pixels


def _gray_palette(image: object) -> bool:
    """Whether a palette image's colours are all grays (a GIF of a grayscale picture)."""
    palette = image.getpalette() or []  # type: ignore[attr-defined]
    triples = np.asarray(palette, dtype=np.uint8).reshape(-1, 3)
    return bool(np.all(triples == triples[:, :1]))


def prepare(image: np.ndarray, preprocessing: Preprocessing) -> np.ndarray:
    """``image`` (uint8 [h, w, c], c 1 or 3) as the dataset's uint8 [H, W, C]: channels converted, then resized.

    Colour to grayscale is Pillow's luminance (ITU-R 601-2); grayscale to colour repeats the channel.
    """
    from PIL import Image

    p = preprocessing
    if image.ndim != 3 or image.shape[2] not in (1, 3) or image.dtype != np.uint8:
        raise BakeoffError(f"an image must be uint8 [height, width, 1 or 3], got {image.dtype} {list(image.shape)}")
    if image.shape[2] != p.channels:
        if p.channels == 3:
            image = np.repeat(image, 3, axis=2)
        else:
            image = np.asarray(Image.fromarray(image).convert("L"), dtype=np.uint8)[..., np.newaxis]
    if image.shape[:2] != (p.height, p.width):
        if p.resize == NO_RESIZE:
            raise BakeoffError(
                f"an image of {image.shape[0]}x{image.shape[1]},"
                f" and this dataset's images are all {p.height}x{p.width}: send one of that size"
            )
        filter_ = getattr(Image.Resampling, p.resize.upper())
        plane = Image.fromarray(image[..., 0] if p.channels == 1 else image)
        image = np.asarray(plane.resize((p.width, p.height), filter_), dtype=np.uint8)
        image = image[..., np.newaxis] if image.ndim == 2 else image
    return np.ascontiguousarray(image)


def check_resize(method: str) -> str:
    """``method`` if Pillow has a filter of that name (or it is 'none'); one line if not."""
    from PIL import Image

    names = [NO_RESIZE, *(f.name.lower() for f in Image.Resampling)]
    if method not in names:
        raise BakeoffError(f"resize method {method!r} is not one of {', '.join(names)}")
    return method
