"""One image file to the dataset's pixels: the decoding and conversion ingest and serving share."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from bakeoff.components.data.preprocess import decode, prepare
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.records import Preprocessing

pytestmark = pytest.mark.unit


def encoded(pixels: np.ndarray, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels.squeeze(-1) if pixels.shape[-1] == 1 else pixels).save(buffer, format=fmt, **options)
    return buffer.getvalue()


RGB = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
GRAY = np.random.default_rng(1).integers(0, 256, (5, 7, 1), dtype=np.uint8)


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "WEBP"])
@pytest.mark.parametrize("pixels", [RGB, GRAY], ids=["rgb", "gray"])
def test_a_lossless_file_decodes_to_its_exact_pixels_with_a_channel_axis(fmt: str, pixels: np.ndarray) -> None:
    options = {"lossless": True} if fmt == "WEBP" else {}
    got = decode(encoded(pixels, fmt, **options), "a." + fmt.lower())
    # WebP stores grayscale as colour: the three channels come back equal, as one channel of the same values
    assert got.dtype == np.uint8 and got.shape[2] in (1, 3)
    np.testing.assert_array_equal(got if got.shape[2] == pixels.shape[2] else got[..., :1], pixels)


def test_a_gif_gives_its_first_frame_and_a_jpeg_its_size() -> None:
    frames = [Image.fromarray(GRAY[..., 0]), Image.fromarray(255 - GRAY[..., 0])]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
    np.testing.assert_array_equal(decode(buffer.getvalue(), "a.gif"), GRAY)
    assert decode(encoded(RGB, "JPEG"), "a.jpg").shape == (5, 7, 3)


def test_a_corrupt_or_truncated_file_is_refused_naming_it() -> None:
    for data in (b"not an image", encoded(RGB, "PNG")[:40]):
        with pytest.raises(BakeoffError, match=r"^cats/x\.png: not a readable image .*: replace or remove the file$"):
            decode(data, "cats/x.png")


def test_prepare_converts_channels_then_resizes_by_the_recorded_method() -> None:
    gray = prepare(RGB, Preprocessing(5, 7, 1, "none"))
    expected = np.asarray(Image.fromarray(RGB).convert("L"))[..., np.newaxis]
    np.testing.assert_array_equal(gray, expected)
    np.testing.assert_array_equal(prepare(GRAY, Preprocessing(5, 7, 3, "none")), np.repeat(GRAY, 3, axis=2))
    resized = prepare(RGB, Preprocessing(10, 14, 3, "nearest"))
    assert resized.shape == (10, 14, 3)
    np.testing.assert_array_equal(resized[::2, ::2], RGB)  # nearest doubling: every pixel twice each way
    assert prepare(GRAY, Preprocessing(3, 3, 1, "bilinear")).shape == (3, 3, 1)


def test_prepare_without_a_resize_method_refuses_another_size() -> None:
    with pytest.raises(BakeoffError, match=r"^an image of 5x7, and this dataset's images are all 28x28: "):
        prepare(GRAY, Preprocessing(28, 28, 1, "none"))
