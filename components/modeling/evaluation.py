"""Scoring an exported model on a split, through the same signature that serves it."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from components.modeling.savedmodel import ARRAYS_SIGNATURE


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
