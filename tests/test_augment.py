"""A variant's augmentation of its training batches: flips, shifts and random crops, as tf.data applies them."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.components.spec import Training
from bakeoff.components.training import augment

pytestmark = pytest.mark.unit


def _blocks(count: int, side: int = 28, rows: slice = slice(10, 18), columns: slice = slice(4, 8)) -> np.ndarray:
    """``count`` images, each a block of its own value (off the centre: any move or mirror of it shows)."""
    images = np.zeros((count, side, side), np.uint8)
    images[:, rows, columns] = np.arange(1, count + 1).reshape(count, 1, 1)
    return images


def test_random_flip_mirrors_some_images_and_keeps_labels() -> None:
    import tensorflow as tf

    images, labels = _blocks(255), np.arange(255)
    flipped, same_labels = augment.random_flip(tf.constant(images), tf.constant(labels))
    flipped = flipped.numpy()
    mirrored = [np.array_equal(out, image[:, ::-1]) for out, image in zip(flipped, images, strict=True)]
    kept = [np.array_equal(out, image) for out, image in zip(flipped, images, strict=True)]
    assert all(m != k for m, k in zip(mirrored, kept, strict=True))  # each image mirrored or left, never both
    assert 64 < sum(mirrored) < 192  # about half, for 255 images
    assert np.array_equal(same_labels.numpy(), labels)


def test_random_shift_moves_each_image_by_its_own_draw_within_its_bound() -> None:
    import tensorflow as tf

    images, labels = _blocks(255), np.arange(255)
    shifted, same_labels = augment.random_shift(2)(tf.constant(images), tf.constant(labels))
    shifted = shifted.numpy()
    assert shifted.shape == images.shape and shifted.dtype == images.dtype
    moves = set()
    for index, image in enumerate(shifted):
        rows, columns = np.nonzero(image)
        moves.add((rows.min() - 10, columns.min() - 4))
        assert image.sum() == images[index].sum()  # the whole block moved, nothing else came in
        assert set(image[rows, columns]) == {index + 1}  # its own image, not a neighbour's
    assert moves <= {(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)}
    assert len(moves) > 15  # of the 25, for 255 images: each image draws its own
    assert np.array_equal(same_labels.numpy(), labels)


@pytest.mark.parametrize("channels", [(), (3,)])
def test_random_crop_enlarges_a_crop_of_each_image_back_to_its_size(channels: tuple[int, ...]) -> None:
    """A crop keeps the image's shape and dtype and shows a part of it larger: the centred block grows, stays its
    own image's, and each image has its own box."""
    import tensorflow as tf

    images = _blocks(128, 32, slice(12, 20), slice(12, 20))
    images = np.repeat(images[..., np.newaxis], channels[0], axis=-1) if channels else images
    labels = np.arange(128)
    cropped, same_labels = augment.random_crop(0.5)(tf.constant(images), tf.constant(labels))
    cropped = cropped.numpy()
    assert cropped.shape == images.shape and cropped.dtype == images.dtype
    planes = cropped[..., 0] if channels else cropped
    areas = [int((plane > 0).sum()) for plane in planes]
    # Each box holds part of the centred 8x8 block (a side of at least 0.61 of the image spans its middle), enlarged:
    # a box may cut the block's edge, and bilinear edges round down, so the growth shows on average, not in each.
    assert min(areas) > 0 and sum(areas) / len(areas) > 64
    assert len(set(areas)) > 20  # a box per image
    assert [int(plane.max()) for plane in planes] == list(range(1, 129))  # each image its own
    assert np.array_equal(same_labels.numpy(), labels)


def test_augmented_applies_what_the_variant_names_and_nothing_else() -> None:
    import tensorflow as tf

    images = _blocks(64)
    batches = tf.data.Dataset.from_tensor_slices((images, np.arange(64))).batch(64)
    plain = next(iter(augment.augmented(batches, Training())))[0].numpy()
    assert np.array_equal(plain, images)
    training = Training(random_flip=True, random_shift=2, random_crop=0.6)
    changed = next(iter(augment.augmented(batches, training)))[0].numpy()
    assert changed.shape == images.shape
    assert sum(not np.array_equal(out, image) for out, image in zip(changed, images, strict=True)) > 48
