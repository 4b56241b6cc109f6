"""A variant's augmentation of its training batches in tf.data: flips, shifts and random crops, each named in its
``training`` section."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bakeoff.components.spec import Training

CROP_ASPECT = (3 / 4, 4 / 3)  # the aspect ratios a random crop may have, as Inception's preprocessing draws them


def augmented(batches: Any, training: Training) -> Any:
    """``batches`` (a tf.data.Dataset of (images, labels) batches) with ``training``'s augmentation applied to each."""
    import tensorflow as tf

    if training.random_crop:
        batches = batches.map(random_crop(training.random_crop), num_parallel_calls=tf.data.AUTOTUNE)
    if training.random_flip:
        batches = batches.map(random_flip, num_parallel_calls=tf.data.AUTOTUNE)
    if training.random_shift:
        batches = batches.map(random_shift(training.random_shift), num_parallel_calls=tf.data.AUTOTUNE)
    return batches


def random_flip(images: Any, labels: Any) -> tuple[Any, Any]:
    """Mirrors a random half of a batch left-right: cheap augmentation against overfitting."""
    import tensorflow as tf

    # [n, 1, 1] or [n, 1, 1, 1]: one draw per image, whether the batch carries a channel axis or not
    flip = tf.random.uniform([tf.shape(images)[0], *[1] * (images.shape.rank - 1)]) < 0.5
    return tf.where(flip, tf.reverse(images, axis=[2]), images), labels


def random_shift(pixels: int) -> Callable[[Any, Any], tuple[Any, Any]]:
    """Moves each image of a batch by its own draw of up to ``pixels`` each way, filling with background (0)."""
    import tensorflow as tf

    def shift(images: Any, labels: Any) -> tuple[Any, Any]:
        count, height, width = tf.shape(images)[0], tf.shape(images)[1], tf.shape(images)[2]
        channels = [[0, 0]] * (images.shape.rank - 3)  # an artifact's images carry a channel axis: not padded
        padded = tf.pad(images, [[0, 0], [pixels, pixels], [pixels, pixels], *channels])
        offsets = tf.random.uniform([2, count, 1], 0, 2 * pixels + 1, tf.int32)
        rows = tf.gather(padded, offsets[0] + tf.range(height), axis=1, batch_dims=1)
        return tf.gather(rows, offsets[1] + tf.range(width), axis=2, batch_dims=1), labels

    return shift


def random_crop(least_area: float) -> Callable[[Any, Any], tuple[Any, Any]]:
    """Crops each image of a batch to its own random box (``least_area`` to all of its area, an aspect ratio in
    ``CROP_ASPECT``) and resizes the box back to the image's size, bilinearly, in the images' own dtype."""
    import tensorflow as tf

    def crop(images: Any, labels: Any) -> tuple[Any, Any]:
        planar = images.shape.rank == 3  # [n, height, width]: a channel axis for the crop, taken off after
        stacked = images[..., tf.newaxis] if planar else images
        count = tf.shape(stacked)[0]
        area = tf.random.uniform([count], least_area, 1.0)
        low, high = tf.math.log(CROP_ASPECT[0]), tf.math.log(CROP_ASPECT[1])
        aspect = tf.exp(tf.random.uniform([count], low, high))
        heights = tf.minimum(tf.sqrt(area / aspect), 1.0)  # as fractions of the side
        widths = tf.minimum(tf.sqrt(area * aspect), 1.0)
        tops = tf.random.uniform([count]) * (1.0 - heights)
        lefts = tf.random.uniform([count]) * (1.0 - widths)
        boxes = tf.stack([tops, lefts, tops + heights, lefts + widths], axis=1)
        size = tf.shape(stacked)[1:3]
        cropped = tf.image.crop_and_resize(tf.cast(stacked, tf.float32), boxes, tf.range(count), size)
        cropped = tf.cast(cropped, images.dtype)
        return (cropped[..., 0] if planar else cropped), labels

    return crop
