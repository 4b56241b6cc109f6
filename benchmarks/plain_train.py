"""The obvious alternative: one plain Keras process, no strategy, the same model, data and global batch.

``python -m benchmarks.plain_train --variant JSON --data DIR --global-batch N --examples N --threads N``
prints one JSON line with examples/s measured the same way the worker measures it. With ``--seconds S`` it trains
whole epochs until S seconds have passed (the variant's flips included) and adds the test split's accuracy: the plain
baseline of a bake-off given the same wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--global-batch", type=int, required=True)
    parser.add_argument("--examples", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--steps-per-execution", type=int, default=1, help="1: what a plain script does")
    parser.add_argument("--seconds", type=float, default=0, help="train epochs until this much time has passed")
    args = parser.parse_args(argv)

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from bakeoff.components.data import artifact as dataset
    from bakeoff.components.modeling.architectures import ARCHITECTURES
    from bakeoff.components.modeling.optimizers import make_optimizer
    from bakeoff.components.spec import from_dict
    from bakeoff.components.storage import open_store
    from bakeoff.components.training.callbacks import Throughput

    variant = from_dict(json.loads(args.variant))
    store = open_store(args.data)
    metadata = dataset.read_metadata(store)
    train = dataset.read_shards(store, "train")
    steps = args.examples // args.global_batch
    data = (
        tf.data.Dataset.from_tensor_slices((train.images[: args.examples], train.labels[: args.examples]))
        .shuffle(args.examples, seed=0)
        .repeat()
        .batch(args.global_batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    model = ARCHITECTURES[variant.architecture].build(
        tuple(metadata.image_shape), len(metadata.class_names), variant.model_config()
    )
    model.compile(
        optimizer=make_optimizer(
            variant.training.optimizer,
            variant.training.learning_rate,
            variant.training.schedule,
            steps * args.epochs,
            args.epochs,
            variant.training.ema_momentum,
        ),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        steps_per_execution=args.steps_per_execution,
    )
    throughput = Throughput(args.global_batch)
    callbacks = [throughput, *([_deadline(args.seconds)] if args.seconds else [])]
    if args.seconds and variant.training.random_flip:
        data = data.map(lambda images, labels: (tf.image.random_flip_left_right(images), labels))
    history = model.fit(data, epochs=args.epochs, steps_per_epoch=steps, verbose=0, callbacks=callbacks)
    result = {"examples_per_second": throughput.examples_per_second, "steps": steps * len(history.epoch)}
    if args.seconds:
        test = dataset.read_shards(store, "test")
        _, accuracy = model.evaluate(test.images.astype("float32"), test.labels, batch_size=500, verbose=0)
        result |= {"epochs": len(history.epoch), "test_accuracy": float(accuracy)}
    print(json.dumps(result))
    return 0


def _deadline_callback() -> type:
    import time

    import tf_keras as keras

    class Deadline(keras.callbacks.Callback):
        """Stops training at the end of the first epoch that ends past ``seconds`` after training began."""

        def __init__(self, seconds: float) -> None:
            super().__init__()
            self.seconds, self.began = seconds, 0.0

        def on_train_begin(self, logs: dict | None = None) -> None:
            self.began = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
            if time.perf_counter() - self.began >= self.seconds:
                self.model.stop_training = True

    return Deadline


def _deadline(seconds: float) -> object:
    return _deadline_callback()(seconds)


if __name__ == "__main__":
    sys.exit(main())
