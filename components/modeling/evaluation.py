"""Scoring an exported model on a split, through the same signature that serves it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bakeoff.components.modeling.savedmodel import ARRAYS_SIGNATURE

MIN_PROBABILITY = 1e-7  # a certain mistake costs -log(1e-7) ≈ 16 instead of infinity


def predict(model_dir: Path, images: np.ndarray, batch_size: int = 1000) -> np.ndarray:
    """The exported model's class probabilities for ``images`` (``[n, 10]``), through its serving signature.

    Going through the signature (not Keras) scores exactly what will be
    served, and the same code scores every candidate.
    """
    import tensorflow as tf

    serve = tf.saved_model.load(str(model_dir)).signatures[ARRAYS_SIGNATURE]
    rank = serve.structured_input_signature[1]["images"].shape.rank
    if images.ndim == rank + 1 and images.shape[-1] == 1:  # an artifact's [n, H, W, 1], a signature of [n, H, W]
        images = images[..., 0]
    return np.concatenate(
        [
            serve(images=tf.constant(images[start : start + batch_size], tf.float32))["probabilities"].numpy()
            for start in range(0, len(images), batch_size)
        ]
    )


def outcomes(probabilities: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per example: whether the predicted class is the true one, and its cross-entropy (float64).

    Two models' outcomes on the same examples are what a paired test compares.
    """
    truth = labels.astype(np.int64)
    picked = np.clip(probabilities[np.arange(len(truth)), truth], MIN_PROBABILITY, 1.0)
    # float64: a float32 sum of 10,000 terms loses digits
    return probabilities.argmax(axis=1) == truth, -np.log(picked).astype(np.float64)


def score(probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy and mean cross-entropy of predicted ``probabilities`` against the true ``labels``."""
    correct, loss = outcomes(probabilities, labels)
    return {"accuracy": int(correct.sum()) / len(labels), "loss": float(loss.sum()) / len(labels)}


def evaluate(model_dir: Path, images: np.ndarray, labels: np.ndarray, batch_size: int = 1000) -> dict[str, float]:
    """Accuracy and mean cross-entropy of an exported model on a split, through its serving signature."""
    return score(predict(model_dir, images, batch_size), labels)


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray, classes: int) -> list[list[int]]:
    """``matrix[true][predicted]``: how many images of each true class went to each predicted class."""
    matrix = np.zeros((classes, classes), np.int64)
    np.add.at(matrix, (labels.astype(np.int64), predicted.astype(np.int64)), 1)
    return matrix.tolist()


def confident_mistakes(probabilities: np.ndarray, labels: np.ndarray, count: int) -> list[int]:
    """Indices of up to ``count`` wrongly predicted images, the most confident first (ties: the lower index)."""
    predicted = probabilities.argmax(axis=1)
    wrong = np.flatnonzero(predicted != labels.astype(np.int64))
    confidence = probabilities[wrong, predicted[wrong]]
    return wrong[np.lexsort((wrong, -confidence))][:count].tolist()
