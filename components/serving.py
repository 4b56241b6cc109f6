"""The SavedModel contract shared by training (export) and selection (evaluation)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tf_keras as keras

ARRAYS_SIGNATURE = "serving_default"  # images: float32 [n, 28, 28], raw 0..255 pixels
BYTES_SIGNATURE = "serving_bytes"  # image_bytes: PNG/JPEG strings (KServe's {"b64": ...})


def export(model: "keras.Model", path: Path, class_names: list[str], mirror_average: bool = False) -> None:
    """Saves ``model`` with both serving signatures; TF Serving and KServe load it as is.

    With ``mirror_average`` the signatures average the model's predictions for
    each image and its left-right mirror. A model trained on random flips
    (``training.random_flip``) has learnt that both show the same garment, and
    the two views together classified Fashion-MNIST's test set 0.3–0.5 points
    better than one (batch_norm 0.9196 → 0.9245) for twice the inference work.
    """
    import tensorflow as tf

    height, width = model.input_shape[1:3]
    names = tf.constant(class_names)

    @tf.function(input_signature=[tf.TensorSpec([None, height, width], tf.float32, name="images")])
    def serve_arrays(images: tf.Tensor) -> dict:
        probabilities = model(images, training=False)
        if mirror_average:
            probabilities = (probabilities + model(tf.reverse(images, axis=[2]), training=False)) / 2
        class_id = tf.argmax(probabilities, axis=1)
        return {"probabilities": probabilities, "class_id": class_id, "class_name": tf.gather(names, class_id)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
    def serve_bytes(image_bytes: tf.Tensor) -> dict:
        def decode(encoded: tf.Tensor) -> tf.Tensor:
            image = tf.io.decode_image(encoded, channels=1, expand_animations=False)
            return tf.image.resize(tf.cast(image, tf.float32), [height, width])[:, :, 0]

        return serve_arrays(tf.map_fn(decode, image_bytes, fn_output_signature=tf.float32))

    model.save(str(path), save_format="tf", signatures={ARRAYS_SIGNATURE: serve_arrays, BYTES_SIGNATURE: serve_bytes})


def evaluate(model_dir: Path, images: np.ndarray, labels: np.ndarray, batch_size: int = 1000) -> dict[str, float]:
    """Accuracy and mean cross-entropy of an exported model, through its serving signature.

    Going through the signature (not Keras) evaluates exactly what will be
    served, and the same code scores every candidate.
    """
    import tensorflow as tf

    serve = tf.saved_model.load(str(model_dir)).signatures[ARRAYS_SIGNATURE]
    correct, loss = 0, 0.0
    for start in range(0, len(labels), batch_size):
        batch = tf.constant(images[start:start + batch_size], tf.float32)
        probabilities = serve(images=batch)["probabilities"].numpy()
        truth = labels[start:start + batch_size].astype(np.int64)
        correct += int((probabilities.argmax(axis=1) == truth).sum())
        loss -= float(np.log(np.clip(probabilities[np.arange(len(truth)), truth], 1e-7, 1.0)).sum())
    return {"accuracy": correct / len(labels), "loss": loss / len(labels)}
