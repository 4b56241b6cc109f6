"""The SavedModel contract: two serving signatures that TF Serving, KServe and selection all use."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import tf_keras as keras

    from bakeoff.components.spec import Training

ARRAYS_SIGNATURE = "serving_default"  # images: float32 [n, height, width, channels], raw 0..255 pixels
BYTES_SIGNATURE = "serving_bytes"  # image_bytes: PNG/JPEG strings (KServe's {"b64": ...})


def mirror_averaged(training: Training) -> bool:
    """Whether a variant's export averages each image with its mirror: it does when the variant trained on flips."""
    return training.random_flip


def served(model: keras.Model, images: Any, mirror_average: bool) -> Any:
    """The probabilities the export serves for float ``images`` [n, height, width(, channels)]; validation ranks by
    them too."""
    import tensorflow as tf

    if len(images.shape) == len(model.input_shape) - 1:  # [n, height, width] for a model of one channel
        images = images[..., tf.newaxis]

    probabilities = model(images, training=False)
    if mirror_average:
        probabilities = (probabilities + model(tf.reverse(images, axis=[2]), training=False)) / 2
    return probabilities


def export(model: keras.Model, path: Path, class_names: list[str], mirror_average: bool = False) -> None:
    """Saves ``model`` with both serving signatures; TF Serving and KServe load it as is.

    With ``mirror_average`` the signatures average the model's predictions for
    each image and its left-right mirror: a model trained on random flips has
    learnt that both show the same garment, and two views classify better
    than one for twice the inference work (figures in benchmarks/results.md).
    """
    import tensorflow as tf

    shape = list(model.input_shape[1:])  # [height, width, channels], or [height, width] for a model built before
    height, width = shape[:2]
    channels = shape[2] if len(shape) == 3 else 1
    names = tf.constant(class_names)

    @tf.function(input_signature=[tf.TensorSpec([None, *shape], tf.float32, name="images")])
    def serve_arrays(images: tf.Tensor) -> dict:
        probabilities = served(model, images, mirror_average)
        class_id = tf.argmax(probabilities, axis=1)
        return {"probabilities": probabilities, "class_id": class_id, "class_name": tf.gather(names, class_id)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
    def serve_bytes(image_bytes: tf.Tensor) -> dict:
        # For TF Serving, which runs the SavedModel alone: TensorFlow's bilinear resize. `bakeoff serve` decodes
        # and resizes with ingest's own code (data/preprocess.py) instead, so its answers match the training data.
        def decode(encoded: tf.Tensor) -> tf.Tensor:
            image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
            resized = tf.image.resize(tf.cast(image, tf.float32), [height, width])
            return resized if len(shape) == 3 else resized[:, :, 0]

        return serve_arrays(tf.map_fn(decode, image_bytes, fn_output_signature=tf.float32))

    # Only the signatures are served (tf.saved_model.load): no per-layer traces for Keras to reload the model with,
    # no optimizer state (a resume reads the job's backup); a quarter of the files, saved in a fifth of the time.
    model.save(
        str(path),
        save_format="tf",
        signatures={ARRAYS_SIGNATURE: serve_arrays, BYTES_SIGNATURE: serve_bytes},
        save_traces=False,
        include_optimizer=False,
    )
