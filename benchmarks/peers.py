"""Benchmark entry: bakeoff's default search beside KerasTuner's Hyperband and Optuna's TPE with its Hyperband pruner,
the same search space, wall-clock budget, training recipe and scoring each, one after another on one machine.

What is held equal, so that the margin measures the search and nothing else:

- Training. Every peer trial trains through bakeoff's worker pieces: the model builder and optimizer
  (``training/model.py``: the cosine schedule, EMA, ``steps_per_execution``), the ``tf.data`` input with its flips and
  shift (``training/inputs.py``), validation on the averaged weights and both mirrors (``Validation``), the
  replica's strategy and thread settings (``worker.make_strategy``). A peer runs in one process on all cores,
  tcmalloc preloaded as the local backend preloads it for a replica; its batch is bakeoff's global batch.
- Scoring. Each winner is exported by bakeoff's ``export`` (mirror-averaged where the variant trains with
  ``random_flip``) and scored through its serving signature on the artifact's test split, by the functions
  selection scores bakeoff's own winner with (``evaluation.predict`` and ``score``). A peer's winner is its best
  trial's model as that trial's ``fit`` left it, as a bakeoff job exports its model: the moving average of the
  weights, which its validation ranked (KerasTuner's own checkpoint holds the raw weights).
- Epochs. One ceiling for all three: the ``max_epochs`` bakeoff's plan picked for the budget in that contest
  (read from its winner's schedule), the peers' Hyperband ``max_epochs`` / ``max_resource`` and the length of
  their learning-rate schedule. Chosen over holding bakeoff to the written 20 because fitting the epochs to the
  budget is part of the default being measured; the peers get its answer for free, so bakeoff keeps no edge
  from it (two earlier contests' winners trained to epochs 36 and 40 while the peers stopped at 20).
- Time. Each tool's wall clock runs from its process's start to its winner scored, ingest included. The first
  contest runs bakeoff on an empty ``BAKEOFF_CACHE`` folder, so its time includes measuring this machine's costs
  (``calibrated`` in its outcome); the later ones reuse that folder as the runs left it, never the user's cache.
- Seeds. ``contests`` contests on seeds ``seed``, ``seed + 1``, ...: bakeoff's ``search.seed`` and each peer's
  sampler seed. The figures are means over them with their spread; the goal (``headline.py``) is bakeoff's mean
  ≥ each peer's mean.

``python -m benchmarks.peers [--budget-seconds N --max-train-examples N --contests N]`` runs it alone (a smoke run
at a tiny budget); ``python -m benchmarks.run --only peers`` runs it at ``FULL``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from bakeoff.components import logs
from bakeoff.components.spaces import Space
from bakeoff.components.spec import Base, Variant
from bakeoff.components.tfenv import quiet_tensorflow
from benchmarks.harness import Context, Figure, add_size_flags
from benchmarks.search import run_bakeoff

if TYPE_CHECKING:
    from bakeoff.components.training.callbacks import Validation

TOOLS = ("bakeoff", "keras-tuner", "optuna")
# KerasTuner's default is one pass of its brackets, which a small ceiling finishes well within the budget: passes
# until the budget ends them instead, as Optuna's `timeout` ends Optuna and the plan fills bakeoff's budget.
HYPERBAND_ITERATIONS = 1000
PEERS = TOOLS[1:]


@dataclasses.dataclass(frozen=True)
class Size:
    """How big a run of the entry is."""

    budget_seconds: int = 900  # each tool's wall clock: the default bake-off's goal is 15 minutes
    max_train_examples: int = 0  # 0: all 55,000
    contests: int = 3  # seeds seed, seed + 1, ...: the figures are means over them
    seed: int = 0


FULL = Size()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One tool's search in one contest: its winner, the winner's test accuracy as bakeoff scores a winner, and the
    search's wall time."""

    tool: str
    seed: int
    winner: str
    test_accuracy: float
    seconds: float
    configurations: int  # distinct points of the space trained (a Hyperband trial resuming another is not one)
    max_epochs: int  # the epoch ceiling it searched under
    mirrored: bool  # its winner scored as the mean over each image and its mirror (it trains with random_flip)
    calibrated: bool = False  # bakeoff only: its wall time includes measuring this machine's costs afresh

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


def bakeoff_config(size: Size, seed: int, where: Path) -> Path:
    """The default config with ``search.budget.minutes`` set to the entry's budget (bakeoff fits its plan to it) and
    ``search.seed`` to the contest's."""
    document, _ = _default()
    document["search"]["budget"] = {"minutes": size.budget_seconds / 60}
    document["search"]["seed"] = seed
    path = where / "budgeted.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def one_process(variant: Variant, max_epochs: int) -> Variant:
    """``variant`` as a peer's one process trains it: one replica taking bakeoff's whole global batch, its schedule
    over ``max_epochs``; every other training setting (augmentation, EMA, steps per execution) as bakeoff's."""
    training = dataclasses.replace(
        variant.training, batch_size=variant.training.batch_size * variant.workers, epochs=max_epochs
    )
    return dataclasses.replace(variant, workers=1, training=training)


class Trials:
    """A peer's trials, each trained as a bakeoff replica trains a job, and its winner scored as selection scores
    bakeoff's; one per peer process, on the artifact in ``data_dir``."""

    def __init__(self, data_dir: Path, max_train_examples: int, max_epochs: int) -> None:
        from bakeoff.components.data import artifact
        from bakeoff.components.storage import open_store
        from bakeoff.components.training import worker

        self.data = open_store(str(data_dir))
        self.metadata = artifact.read_metadata(self.data)
        self.max_train_examples, self.max_epochs = max_train_examples, max_epochs
        self.strategy = worker.make_strategy()  # the replica's, under the thread settings the peer process got
        self.validation = artifact.read_shards(self.data, "validation")
        self.best: tuple[float, Any, Variant | None] = (-1.0, None, None)  # the best finished trial's score, model

    def variant(self, config: Any, base: str, values: Mapping[str, Any]) -> Variant:
        """A tool's draw as this process trains it, named after its entry and values."""
        drawn = config.bases[base].variant(values)
        return one_process(dataclasses.replace(drawn, name=_described(base, values)), self.max_epochs)

    def compiled(self, variant: Variant) -> Any:
        """The variant's model as the worker builds and compiles it: schedule, EMA and steps per execution."""
        from bakeoff.components.training.model import compiled_model

        return compiled_model(variant, self.strategy, self.metadata, self._shape(variant).steps_per_epoch)

    def inputs(self, variant: Variant) -> Any:
        """The worker's training batches for ``variant``: shuffled, flipped and shifted as its spec says."""
        from bakeoff.components.training.inputs import distributed_inputs

        return distributed_inputs(variant, self.strategy, self.data, self._shape(variant))

    def fit(
        self, model: Any, variant: Variant, epochs: int, initial_epoch: int = 0, callbacks: Sequence[Any] = ()
    ) -> Any:
        """Trains ``model`` to ``epochs`` as a job does, validating every epoch first among ``callbacks``; its
        History."""
        return model.fit(
            self.inputs(variant),
            epochs=epochs,
            initial_epoch=initial_epoch,
            steps_per_epoch=self._shape(variant).steps_per_epoch,
            callbacks=[self._validation(variant, epochs), *callbacks],
            verbose=0,
        )

    def offer(self, score: float, model: Any, variant: Variant) -> None:
        """Keeps ``model`` if its trial scored best so far: the tools keep scores, their users keep the model."""
        if score > self.best[0]:
            self.best = (score, model, variant)

    def test_accuracy(self, where: Path) -> tuple[float, bool]:
        """The kept winner's test accuracy as selection scores a winner, and whether that was mirror-averaged."""
        from bakeoff.components.data import artifact
        from bakeoff.components.modeling.evaluation import score
        from bakeoff.components.modeling.savedmodel import mirror_averaged

        _, model, variant = self.best
        if variant is None:
            raise RuntimeError("no trial finished within the budget: raise --budget-seconds")
        test = artifact.read_shards(self.data, "test")
        probabilities = served_probabilities(model, variant, self.metadata.class_names, test.images, where)
        return score(probabilities, test.labels)["accuracy"], mirror_averaged(variant.training)

    def _shape(self, variant: Variant) -> Any:
        from bakeoff.components.training.inputs import epoch_shape

        return epoch_shape(variant, self.strategy, self.metadata.counts["train"], self.max_train_examples)

    def _validation(self, variant: Variant, last_epoch: int) -> Validation:
        from bakeoff.components.modeling.savedmodel import mirror_averaged
        from bakeoff.components.training.callbacks import Validation

        images, labels = self.validation.images, self.validation.labels
        return Validation(self.strategy, images, labels, 1, last_epoch, mirror_averaged(variant.training))


def served_probabilities(model: Any, variant: Variant, class_names: list[str], images: Any, where: Path) -> np.ndarray:
    """``model`` exported as a bakeoff job exports it (mirror-averaged where ``variant`` trains with flips), then its
    class probabilities for ``images`` through the serving signature, as selection predicts a candidate's."""
    from bakeoff.components.modeling.evaluation import predict
    from bakeoff.components.modeling.savedmodel import export, mirror_averaged

    export(model, where, class_names, mirror_average=mirror_averaged(variant.training))
    return predict(where, images)


def _described(base: str, values: Mapping[str, Any]) -> str:
    from bakeoff.components.spaces import describe

    return " ".join([base, describe(values)]).strip()


def _load_keras_tuner() -> None:
    """Imports KerasTuner on tf-keras, the Keras bakeoff's worker trains with. KerasTuner picks its Keras by
    ``import keras``'s version alone (its backend/config.py): it imports while that name is tf-keras, and then works
    through ``tf.keras``, which is tf-keras in this process."""
    import tf_keras

    saved = sys.modules.get("keras")
    sys.modules["keras"] = tf_keras
    try:
        import keras_tuner  # noqa: F401
    finally:
        if saved is None:
            sys.modules.pop("keras")
        else:
            sys.modules["keras"] = saved


def keras_tuner(trials: Trials, seed: int, scratch: Path, deadline: float) -> tuple[str, int]:
    """KerasTuner's Hyperband as its users customize training (``HyperModel.fit``): its defaults but the contest's
    max epochs, the config's eta and passes until the budget ends. The winner's description and the configurations
    it trained."""
    import tf_keras as keras

    _load_keras_tuner()
    import keras_tuner as tool

    _, config = _default()

    def pick(hp: Any) -> Callable[[str, Space], Any]:
        def ask(name: str, space: Space) -> Any:
            if space.kind == "choice":
                return hp.Choice(name, list(space.options))
            if space.kind == "int_uniform":
                return hp.Int(name, int(space.low), int(space.high))
            return hp.Float(name, space.low, space.high, sampling="log" if space.kind == "log_uniform" else "linear")

        return ask

    class Model(tool.HyperModel):
        def build(self, hp: Any) -> Any:
            base, values = draw(config.bases, pick(hp))
            return trials.compiled(trials.variant(config, base, values))

        def fit(self, hp: Any, model: Any, *args: Any, epochs: int, initial_epoch: int = 0, **kwargs: Any) -> Any:
            base, values = draw(config.bases, lambda name, space: hp.get(name))
            variant = trials.variant(config, base, values)
            history = trials.fit(model, variant, epochs, initial_epoch, kwargs.get("callbacks", []))
            trials.offer(max(history.history.get("val_accuracy", [-1.0])), model, variant)  # the tuner's score
            return history

    class Deadline(keras.callbacks.Callback):
        """Ends the trial at the budget and lets the tuner start no other: Hyperband has no time limit of its own."""

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if time.monotonic() > deadline:
                self.model.stop_training = True
                tuner.oracle.max_trials = len(tuner.oracle.trials)

    tuner = tool.Hyperband(
        Model(),
        objective="val_accuracy",
        max_epochs=trials.max_epochs,
        factor=config.search.halving.eta,
        hyperband_iterations=HYPERBAND_ITERATIONS,
        seed=seed,
        directory=str(scratch),
        project_name="keras-tuner",
    )
    tuner.search(callbacks=[Deadline()], verbose=0)
    tried = {
        tuple(sorted((k, v) for k, v in trial.hyperparameters.values.items() if not k.startswith("tuner/")))
        for trial in tuner.oracle.trials.values()
    }  # Hyperband's own keys (tuner/epochs, tuner/trial_id, ...) mark a trial that resumes another
    return _winner(trials), len(tried)


def optuna(trials: Trials, seed: int, scratch: Path, deadline: float) -> tuple[str, int]:
    """Optuna as its users run it: TPE proposes, the Hyperband pruner stops trials at its rungs (an epoch's
    validation reported from a callback, as optuna-integration's Keras callback does), ``timeout`` is the budget;
    the contest's max epochs and the config's eta, its defaults otherwise."""
    import optuna as tool
    import tf_keras as keras

    _, config = _default()

    class Pruning(keras.callbacks.Callback):
        def __init__(self, trial: Any) -> None:
            super().__init__()
            self.trial, self.pruned = trial, False

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.trial.report(logs["val_accuracy"], epoch + 1)
            self.pruned = self.trial.should_prune()
            # `timeout` only stops new trials: the one running ends at the budget too
            self.model.stop_training = self.pruned or time.monotonic() > deadline

    def objective(trial: Any) -> float:
        def ask(name: str, space: Space) -> Any:
            if space.kind == "choice":
                return trial.suggest_categorical(name, list(space.options))
            if space.kind == "int_uniform":
                return trial.suggest_int(name, int(space.low), int(space.high))
            return trial.suggest_float(name, space.low, space.high, log=space.kind == "log_uniform")

        base, values = draw(config.bases, ask)
        variant = trials.variant(config, base, values)
        model, pruning = trials.compiled(variant), Pruning(trial)
        accuracy = trials.fit(model, variant, trials.max_epochs, callbacks=[pruning]).history["val_accuracy"][-1]
        if pruning.pruned:
            raise tool.TrialPruned()
        trials.offer(accuracy, model, variant)
        return accuracy

    tool.logging.set_verbosity(tool.logging.WARNING)
    study = tool.create_study(
        direction="maximize",
        sampler=tool.samplers.TPESampler(seed=seed),
        pruner=tool.pruners.HyperbandPruner(max_resource=trials.max_epochs, reduction_factor=config.search.halving.eta),
    )
    study.optimize(objective, timeout=max(deadline - time.monotonic(), 0.0))
    return _winner(trials), len(study.trials)


def _winner(trials: Trials) -> str:
    """The kept winner's name: its entry, then its values, as bakeoff names a draw."""
    _, _, variant = trials.best
    return variant.name if variant else "none"


SEARCHES: dict[str, Callable[[Trials, int, Path, float], tuple[str, int]]] = {
    "keras-tuner": keras_tuner,
    "optuna": optuna,
}


def run_peer(tool: str, size: Size, seed: int, max_epochs: int, scratch: Path, started: float) -> Outcome:
    """One peer's search in this process: its own artifact (as bakeoff's run ingests its own), the search until
    its budget, its winner scored."""
    from bakeoff.components.training import worker  # noqa: F401  its Keras and oneDNN settings, before TensorFlow

    deadline = started + size.budget_seconds
    data = Context(scratch, 1).dataset()
    trials = Trials(data, size.max_train_examples, max_epochs)
    winner, configurations = SEARCHES[tool](trials, seed, scratch, deadline)
    accuracy, mirrored = trials.test_accuracy(scratch / "winner")
    seconds = time.monotonic() - started  # as `bakeoff run` is timed: start, imports, data and scoring included
    return Outcome(tool, seed, winner, float(accuracy), seconds, configurations, max_epochs, mirrored)


def peer_environment() -> dict[str, str]:
    """A peer process's environment: a replica's (tcmalloc preloaded) with one replica's threads on all cores."""
    from bakeoff.components.backends import allocator
    from bakeoff.components.backends.local import thread_env
    from bakeoff.components.backends.prefork import replica_environment
    from bakeoff.components.backends.threads import thread_cap

    env = replica_environment(allocator.tcmalloc()) | thread_env(thread_cap(1, 1))
    env.pop("TF_CONFIG", None)  # one process: a cluster of its own
    return env


def _peer(tool: str, size: Size, seed: int, max_epochs: int, scratch: Path) -> Outcome:
    """One peer in a process of its own (`--peer`): all the machine's cores, nothing of bakeoff's run loaded."""
    where = scratch / tool
    where.mkdir()
    contest = dataclasses.replace(size, seed=seed)
    flags = [f"--{field.name.replace('_', '-')}={getattr(contest, field.name)}" for field in dataclasses.fields(Size)]
    command = [sys.executable, "-m", "benchmarks.peers", f"--peer={tool}", f"--max-epochs={max_epochs}"]
    run = subprocess.run(
        [*command, f"--scratch={where}", *flags],
        env=peer_environment(),
        capture_output=True,
        text=True,
    )
    (where / "peer.log").write_text(run.stderr)
    if run.returncode != 0:
        raise RuntimeError(f"the {tool} peer failed: {run.stderr[-2000:]}")
    return Outcome.from_json(run.stdout.strip().splitlines()[-1])


def contest(size: Size, seed: int, scratch: Path, cache: Path) -> list[Outcome]:
    """bakeoff's default search under the budget, its costs cached in ``cache``; then each peer under the same
    budget, to the epoch ceiling bakeoff's plan picked."""
    from bakeoff.components.environment import CACHE_ENV
    from bakeoff.components.modeling.savedmodel import mirror_averaged
    from bakeoff.components.search.calibration_cache import FILE
    from bakeoff.components.spec import from_dict
    from bakeoff.components.storage import open_store, runs

    where = scratch / f"contest-{seed}"
    where.mkdir()
    fresh = not (cache / FILE).exists()
    env = {**os.environ, CACHE_ENV: str(cache)}
    seconds, summary = run_bakeoff(bakeoff_config(size, seed, where), size.max_train_examples, where / "bakeoff", env)
    winner = runs.candidate(open_store(str(where / "bakeoff" / "store")), summary.run_id, summary.winner.variant)
    ours = Outcome(
        "bakeoff",
        seed,
        winner.variant,
        summary.winner.test_accuracy,
        seconds,
        len(summary.contestants()),
        winner.metrics.schedule_epochs,
        mirror_averaged(from_dict(winner.spec).training),
        calibrated=fresh and (cache / FILE).exists(),
    )
    return [ours, *(_peer(tool, size, seed, ours.max_epochs, where) for tool in PEERS)]


def contests(size: Size, scratch: Path) -> list[list[Outcome]]:
    """``size.contests`` contests on successive seeds; the first's bakeoff calibrates on an empty cache."""
    cache = scratch / "cache"
    return [contest(size, size.seed + index, scratch, cache) for index in range(size.contests)]


def spread(values: list[float]) -> float:
    """The sample standard deviation; 0 for a single value."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def figures(size: Size, results: list[list[Outcome]]) -> list[Figure]:
    """The margin of bakeoff's mean over the best peer's mean (its goal: ≥ 0, so ≥ each peer's), the number of
    contests, and each tool's mean winner test accuracy with its spread."""
    by_tool = {tool: [o for outcomes in results for o in outcomes if o.tool == tool] for tool in TOOLS}
    means = {tool: statistics.fmean(o.test_accuracy for o in outcomes) for tool, outcomes in by_tool.items()}
    best = max(PEERS, key=lambda tool: means[tool])
    count = len(results)
    setting = (
        f"the default config's space, {size.budget_seconds / 60:g} min each, {size.max_train_examples or 55000}"
        " training examples, bakeoff's training recipe and scoring for all"
    )
    calibrated = [o.seed for o in by_tool["bakeoff"] if o.calibrated]
    margin = Figure(
        "peers_bakeoff_margin",
        means["bakeoff"] - means[best],
        "",
        detail=f"bakeoff's mean winner test accuracy − the best peer's ({best}), {count} contest(s) at equal budget;"
        f" bakeoff's time includes a fresh calibration in seed(s) {calibrated or 'none'}",
    )
    contests_run = Figure(
        "peers_contests", count, "", detail=f"contests the means are over, seeds from {size.seed}; {setting}"
    )
    return [margin, contests_run] + [
        Figure(
            f"peers_{tool.replace('-', '_')}_test_accuracy",
            means[tool],
            "",
            detail=f"mean of {count}, sd {spread([o.test_accuracy for o in outcomes]):.4f} "
            f"(each: {', '.join(f'{o.test_accuracy:.4f}' for o in outcomes)}); "
            f"{statistics.fmean(o.seconds for o in outcomes) / 60:.1f} min and "
            f"{statistics.fmean(o.configurations for o in outcomes):.1f} configurations a contest, max epochs "
            f"{', '.join(str(o.max_epochs) for o in outcomes)}; winners "
            + ", ".join(f"`{o.winner}`{' (mirror-averaged)' if o.mirrored else ''}" for o in outcomes),
        )
        for tool, outcomes in by_tool.items()
    ]


def table(results: list[list[Outcome]]) -> str:
    """Every contest's outcomes as one Markdown table."""
    rows = [
        "| seed | tool | winner | test accuracy | mirror-averaged | wall time | configurations | max epochs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows += [
        f"| {o.seed} | {o.tool} | `{o.winner}` | {o.test_accuracy:.4f} | {'yes' if o.mirrored else 'no'} "
        f"| {o.seconds / 60:.1f} min{' (calibrating)' if o.calibrated else ''} | {o.configurations} "
        f"| {o.max_epochs} |"
        for outcomes in results
        for o in outcomes
    ]
    return "\n".join(rows)


def peers(context: Context, size: Size = FULL) -> list[Figure]:
    """Mean winner test accuracy and wall time of bakeoff, KerasTuner and Optuna over ``size.contests`` contests,
    the same space, budget, training and scoring each."""
    work = context.scratch / "peers"
    work.mkdir()
    results = contests(size, work)
    context.samples["peers"] = {
        "size": dataclasses.asdict(size),
        "contests": [[dataclasses.asdict(o) for o in outcomes] for outcomes in results],
    }
    return figures(size, results)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()  # a peer's budget runs from its process's start, as bakeoff's covers its whole run
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(parser, FULL)
    # One peer, in the process _peer starts, to the ceiling bakeoff's plan picked:
    parser.add_argument("--peer", choices=list(SEARCHES), help=argparse.SUPPRESS)
    parser.add_argument("--max-epochs", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--scratch",
        type=Path,
        help="keep each tool's files in this new folder, bakeoff's store and the calibration included (default: a "
        "temporary one)",
    )
    args = vars(parser.parse_args(argv))
    tool, max_epochs, scratch = args.pop("peer"), args.pop("max_epochs"), args.pop("scratch")
    size = Size(**args)
    if size.contests < 1 or size.budget_seconds < 1:
        parser.error("--contests and --budget-seconds must be at least 1")
    logs.configure()  # the components' lines, as `bakeoff` shows them
    quiet_tensorflow()
    if tool:
        print(run_peer(tool, size, size.seed, max_epochs, scratch, started).to_json())
        return 0
    if scratch is not None:  # to take a tool's run apart afterwards
        scratch.mkdir(parents=True)
        results = contests(size, scratch)
    else:
        with tempfile.TemporaryDirectory(prefix="bakeoff-bench-peers-") as folder:
            results = contests(size, Path(folder))
    print(table(results))
    for figure in figures(size, results):
        print(f"{figure.key} = {figure.value:.4g}  ({figure.detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
