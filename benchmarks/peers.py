"""Benchmark entry: bakeoff's default search beside KerasTuner's Hyperband and Optuna's TPE with its Hyperband pruner,
the same search space and wall-clock budget each, one after another on one machine.

``python -m benchmarks.peers [--budget-seconds N --max-train-examples N]`` runs it alone (a smoke run at a tiny
budget); ``python -m benchmarks.run --only peers`` runs it at ``FULL``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from bakeoff.components.spaces import Space
from bakeoff.components.spec import Base, Variant
from bakeoff.components.tfenv import quiet_tensorflow
from benchmarks.harness import Context, Figure
from benchmarks.search import run_bakeoff

PEERS = ("keras-tuner", "optuna")
SERVED_MIRRORED = "mirror-averaged where trained with random_flip"  # how bakeoff's winner is scored, as it serves
SERVED_PLAIN = "one view per image"  # how a peer's winner is scored: a Keras model as the tool returns it


@dataclasses.dataclass(frozen=True)
class Size:
    """How big a contest the entry runs."""

    budget_seconds: int = 900  # each tool's wall clock: the default bake-off's goal is 15 minutes
    max_train_examples: int = 0  # 0: all 55,000
    seed: int = 0


FULL = Size()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One tool's search: its winner, the winner's test accuracy as the tool serves it, and the search's wall time."""

    tool: str
    winner: str
    test_accuracy: float
    seconds: float
    configurations: int  # distinct points of the space trained (a Hyperband trial resuming another is not one)
    scored: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        return cls(**json.loads(text))


def draw(bases: Mapping[str, Base], pick: Callable[[str, Space], Any]) -> tuple[str, dict[str, Any]]:
    """One trial's point of the default config's space: which entry (a choice over them), then a value for each of
    that entry's spaces, each asked of the tool by ``pick(name, space)`` under a name unique across entries."""
    base = pick("variant", Space("choice", options=tuple(bases)))
    return base, {field: pick(f"{base}/{field}", space) for field, space in bases[base].spaces.items()}


def _default() -> tuple[dict, Any]:
    """The default config as written and as read: the one source of every tool's space."""
    from bakeoff.components.defaults import CONFIG
    from bakeoff.components.spec import load_config

    return yaml.safe_load(CONFIG.read_text()), load_config(CONFIG)


def bakeoff_config(size: Size, where: Path) -> Path:
    """The default config with ``search.budget.minutes`` set to the entry's budget: bakeoff fits its plan to it."""
    document, _ = _default()
    document["search"]["budget"] = {"minutes": size.budget_seconds / 60}
    path = where / "budgeted.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _data(max_train_examples: int) -> tuple[Any, Any, Any]:
    """(train, validation, test) as bakeoff's artifact splits them; train cut to its first ``max_train_examples``."""
    from bakeoff.components import defaults
    from bakeoff.components.data import artifact, fashion_mnist

    splits = fashion_mnist.read(defaults.SOURCE)
    train, validation = artifact.carve_validation(splits["train"], defaults.VALIDATION_SIZE, defaults.SEED)
    count = max_train_examples or len(train)
    return fashion_mnist.Split(train.images[:count], train.labels[:count]), validation, splits["test"]


def _batch(variant: Variant) -> int:
    """The global batch a bakeoff job of this variant trains with, which a peer's one process takes whole."""
    return variant.training.batch_size * variant.workers


def _compiled(base: Base, values: Mapping[str, Any], epochs: int, train_examples: int) -> Any:
    """bakeoff's own model of this draw, compiled with its optimizer and its schedule over ``epochs``."""
    from bakeoff.components.data.fashion_mnist import CLASSES, IMAGE_SHAPE
    from bakeoff.components.modeling.architectures import ARCHITECTURES
    from bakeoff.components.modeling.optimizers import make_optimizer

    variant = base.variant(values)
    training, steps = variant.training, epochs * (train_examples // _batch(variant))
    model = ARCHITECTURES[variant.architecture].build(IMAGE_SHAPE, CLASSES, variant.model_config())
    optimizer = make_optimizer(
        training.optimizer, training.learning_rate, training.schedule, steps, epochs, training.ema_momentum
    )
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _described(base: str, values: Mapping[str, Any]) -> str:
    from bakeoff.components.spaces import describe

    return " ".join([base, describe(values)]).strip()


def keras_tuner(size: Size, scratch: Path, deadline: float) -> Outcome:
    """KerasTuner's Hyperband as its users run it: one process, its defaults but the config's max epochs and eta."""
    import keras

    sys.modules["tf_keras"] = keras  # KerasTuner takes Keras 3 models only: in this process bakeoff's builders use it
    import keras_tuner

    _, config = _default()
    halving, (train, validation, test) = config.search.halving, _data(size.max_train_examples)

    def pick(hp: Any) -> Callable[[str, Space], Any]:
        def ask(name: str, space: Space) -> Any:
            if space.kind == "choice":
                return hp.Choice(name, list(space.options))
            if space.kind == "int_uniform":
                return hp.Int(name, int(space.low), int(space.high))
            return hp.Float(name, space.low, space.high, sampling="log" if space.kind == "log_uniform" else "linear")

        return ask

    def build(hp: Any) -> Any:
        base, values = draw(config.bases, pick(hp))
        return _compiled(config.bases[base], values, halving.max_epochs, len(train))

    class Deadline(keras.callbacks.Callback):
        """Ends the trial at the budget and lets the tuner start no other: Hyperband has no time limit of its own."""

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if time.monotonic() > deadline:
                self.model.stop_training = True
                tuner.oracle.max_trials = len(tuner.oracle.trials)

    tuner = keras_tuner.Hyperband(
        build,
        objective="val_accuracy",
        max_epochs=halving.max_epochs,
        factor=halving.eta,
        seed=size.seed,
        directory=str(scratch),
        project_name="keras-tuner",
    )
    tuner.search(
        train.images,
        train.labels,
        batch_size=_batch(config.variants[0]),  # one for every trial, as `search` takes it: the defaults' batch
        validation_data=(validation.images, validation.labels),
        callbacks=[Deadline()],
        verbose=0,
    )
    best, model = tuner.get_best_hyperparameters(1)[0], tuner.get_best_models(1)[0]
    base = best.get("variant")
    values = {field: best.get(f"{base}/{field}") for field in config.bases[base].spaces}
    accuracy = model.evaluate(test.images, test.labels, verbose=0)[1]
    tried = {
        tuple(sorted((k, v) for k, v in trial.hyperparameters.values.items() if not k.startswith("tuner/")))
        for trial in tuner.oracle.trials.values()
    }  # Hyperband's own keys (tuner/epochs, tuner/trial_id, ...) mark a trial that resumes another
    seconds = _elapsed(size, deadline)
    return Outcome("keras-tuner", _described(base, values), float(accuracy), seconds, len(tried), SERVED_PLAIN)


def optuna(size: Size, scratch: Path, deadline: float) -> Outcome:
    """Optuna as its users run it: TPE proposes, the Hyperband pruner stops trials at its rungs, ``timeout`` is the
    budget; the config's max epochs and eta, its defaults otherwise."""
    import optuna as tool

    _, config = _default()
    halving, (train, validation, test) = config.search.halving, _data(size.max_train_examples)
    best: dict[str, Any] = {"accuracy": -1.0, "model": None}  # the model of the best finished trial

    def objective(trial: Any) -> float:
        def ask(name: str, space: Space) -> Any:
            if space.kind == "choice":
                return trial.suggest_categorical(name, list(space.options))
            if space.kind == "int_uniform":
                return trial.suggest_int(name, int(space.low), int(space.high))
            return trial.suggest_float(name, space.low, space.high, log=space.kind == "log_uniform")

        base, values = draw(config.bases, ask)
        variant = config.bases[base].variant(values)
        model, batch = _compiled(config.bases[base], values, halving.max_epochs, len(train)), _batch(variant)
        for epoch in range(halving.max_epochs):  # an epoch a fit, each reported to the pruner: Optuna's Keras example
            history = model.fit(
                train.images,
                train.labels,
                batch_size=batch,
                epochs=epoch + 1,
                initial_epoch=epoch,
                validation_data=(validation.images, validation.labels),
                verbose=0,
            )
            accuracy = history.history["val_accuracy"][-1]
            trial.report(accuracy, epoch + 1)
            if trial.should_prune():
                raise tool.TrialPruned()
            if time.monotonic() > deadline:
                break  # `timeout` only stops new trials: the one running ends at the budget too
        if accuracy > best["accuracy"]:
            best.update(accuracy=accuracy, model=model)  # the study keeps values only: the user keeps the model
        return accuracy

    tool.logging.set_verbosity(tool.logging.WARNING)
    study = tool.create_study(
        direction="maximize",
        sampler=tool.samplers.TPESampler(seed=size.seed),
        pruner=tool.pruners.HyperbandPruner(max_resource=halving.max_epochs, reduction_factor=halving.eta),
    )
    study.optimize(objective, timeout=max(deadline - time.monotonic(), 0.0))
    base = study.best_params["variant"]
    values = {field: study.best_params[f"{base}/{field}"] for field in config.bases[base].spaces}
    accuracy = best["model"].evaluate(test.images, test.labels, verbose=0)[1]
    seconds = _elapsed(size, deadline)
    return Outcome("optuna", _described(base, values), float(accuracy), seconds, len(study.trials), SERVED_PLAIN)


def _elapsed(size: Size, deadline: float) -> float:
    """Seconds since the peer's process began (its deadline less the budget), winner scored: as `bakeoff run` is
    timed, start, imports, data and scoring included."""
    return time.monotonic() - (deadline - size.budget_seconds)


TOOLS: dict[str, Callable[[Size, Path, float], Outcome]] = {"keras-tuner": keras_tuner, "optuna": optuna}


def _environment(tool: str) -> dict[str, str]:
    """A peer's process environment: tf.keras is Keras 3 where KerasTuner runs, as it needs."""
    env = dict(os.environ)
    if tool == "keras-tuner":
        env.pop("TF_USE_LEGACY_KERAS", None)
    return env


def _peer(tool: str, size: Size, scratch: Path) -> Outcome:
    """One peer in a process of its own (`--peer`): its own Keras, all the machine's cores, nothing bakeoff loaded."""
    where = scratch / tool
    where.mkdir()
    flags = [f"--{field.name.replace('_', '-')}={getattr(size, field.name)}" for field in dataclasses.fields(Size)]
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.peers", f"--peer={tool}", f"--scratch={where}", *flags],
        env=_environment(tool),
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        raise RuntimeError(f"the {tool} peer failed: {run.stderr[-2000:]}")
    return Outcome.from_json(run.stdout.strip().splitlines()[-1])


def contest(size: Size, scratch: Path) -> list[Outcome]:
    """bakeoff's default search, then each peer, under the same budget on the same machine."""
    seconds, summary = run_bakeoff(bakeoff_config(size, scratch), size.max_train_examples, scratch / "bakeoff")
    winner = summary.winner
    ours = Outcome(
        "bakeoff", winner.variant, winner.test_accuracy, seconds, len(summary.contestants()), SERVED_MIRRORED
    )
    return [ours, *(_peer(tool, size, scratch) for tool in PEERS)]


def table(outcomes: list[Outcome]) -> str:
    """The outcomes as one Markdown table."""
    rows = ["| tool | winner | test accuracy | scored | wall time | configurations |", "|---|---|---|---|---|---|"]
    rows += [
        f"| {o.tool} | `{o.winner}` | {o.test_accuracy:.4f} | {o.scored} | {o.seconds / 60:.1f} min "
        f"| {o.configurations} |"
        for o in outcomes
    ]
    return "\n".join(rows)


def peers(context: Context, size: Size = FULL) -> list[Figure]:
    """Winner test accuracy and wall time of bakeoff, KerasTuner and Optuna, the same space and budget each."""
    work = context.scratch / "peers"
    work.mkdir()
    outcomes = contest(size, work)
    context.samples["peers"] = {"size": dataclasses.asdict(size), "outcomes": [dataclasses.asdict(o) for o in outcomes]}
    setting = f"the default config's space, {size.budget_seconds / 60:g} min each, {size.max_train_examples or 55000}"
    ours, *others = outcomes
    best = max(others, key=lambda o: o.test_accuracy)
    margin = Figure(
        "peers_bakeoff_margin",
        ours.test_accuracy - best.test_accuracy,
        "",
        detail=f"bakeoff's winner's test accuracy − the best peer's ({best.tool}), one contest at equal budget",
    )
    return [margin] + [
        Figure(
            f"peers_{o.tool.replace('-', '_')}_test_accuracy",
            o.test_accuracy,
            "",
            detail=f"winner `{o.winner}` in {o.seconds / 60:.1f} min, {o.configurations} configurations, scored "
            f"{o.scored}; "
            f"{setting} training examples",
        )
        for o in outcomes
    ]


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()  # a peer's budget runs from its process's start, as bakeoff's covers its whole run
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Size):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=int, default=field.default)
    parser.add_argument("--peer", choices=list(TOOLS), help=argparse.SUPPRESS)  # one peer, in the process _peer starts
    parser.add_argument(
        "--scratch",
        type=Path,
        help="keep each tool's files in this new folder, bakeoff's store included (default: a temporary one)",
    )
    args = vars(parser.parse_args(argv))
    tool, scratch = args.pop("peer"), args.pop("scratch")
    size = Size(**args)
    quiet_tensorflow()
    if tool:
        print(TOOLS[tool](size, scratch, started + size.budget_seconds).to_json())
        return 0
    if scratch is not None:  # to take a tool's run apart afterwards
        scratch.mkdir(parents=True)
        outcomes = contest(size, scratch)
    else:
        with tempfile.TemporaryDirectory(prefix="bakeoff-bench-peers-") as folder:
            outcomes = contest(size, Path(folder))
    print(table(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
