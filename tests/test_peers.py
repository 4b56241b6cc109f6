"""benchmarks/peers.py: the peers search the default config's space under bakeoff's budget, train each trial as a
bakeoff replica trains a job, are scored as bakeoff scores its winner, and the goal is over the contests' means."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from bakeoff.components.backends import allocator
from bakeoff.components.data import artifact
from bakeoff.components.defaults import CONFIG
from bakeoff.components.spaces import Space
from bakeoff.components.spec import load_config
from bakeoff.components.storage import open_store
from benchmarks import headline
from benchmarks.peers import (
    Outcome,
    Size,
    Trials,
    bakeoff_config,
    draw,
    figures,
    one_process,
    peer_environment,
    served_probabilities,
)

WIDE_TOP = {"model.dense_units": 128, "training.learning_rate": 0.002}  # a point of the default's `wide_top` space


@pytest.mark.unit
def test_a_peer_is_asked_the_default_configs_entries_and_each_ones_spaces():
    config, asked = load_config(CONFIG), {}

    def pick(name: str, space: Space):
        asked[name] = space
        return "wide_top" if name == "variant" else space.bounds()[0]

    base, values = draw(config.bases, pick)
    written = {item["name"]: item for item in yaml.safe_load(CONFIG.read_text())["variants"]}
    assert asked["variant"] == Space("choice", options=tuple(written))
    spaces = config.bases["wide_top"].spaces
    assert asked == {"variant": asked["variant"], **{f"wide_top/{f}": s for f, s in spaces.items()}}
    assert {name: (s.kind, s.bounds()) for name, s in asked.items() if name != "variant"} == {
        "wide_top/model.dense_units": ("choice", (128, 256)),
        "wide_top/training.learning_rate": ("log_uniform", (0.0015, 0.003)),
    }
    assert (base, values) == (
        "wide_top",
        {f.removeprefix("wide_top/"): s.bounds()[0] for f, s in asked.items() if "/" in f},
    )


@pytest.mark.unit
def test_every_variant_bakeoff_expands_is_a_point_of_the_peers_space():
    config = load_config(CONFIG)
    for variant in config.variants:
        expansion = config.expansions[variant.name]
        drawn = config.bases[expansion.base].variant(expansion.values)
        assert (drawn.model, drawn.workers) == (variant.model, variant.workers)
        assert dataclasses.replace(drawn.training, epochs=variant.training.epochs) == variant.training


@pytest.mark.unit
def test_bakeoff_gets_the_default_config_under_the_peers_budget_and_the_contests_seed(tmp_path):
    budgeted, default = load_config(bakeoff_config(Size(budget_seconds=90), 7, tmp_path)), load_config(CONFIG)
    assert default.search is not None
    assert budgeted.search == dataclasses.replace(default.search, budget_minutes=1.5, seed=7)
    assert [v.model for v in budgeted.variants[:3]] == [v.model for v in default.variants[:3]]


@pytest.mark.unit
def test_an_outcome_crosses_the_peer_process_whole():
    outcome = Outcome("optuna", 1, "wide_top model.dense_units=128", 0.91, 60.5, 7, 36, True)
    assert Outcome.from_json(outcome.to_json()) == outcome


@pytest.mark.unit
def test_a_peer_trains_bakeoffs_recipe_in_one_process_on_the_global_batch_to_the_contests_ceiling():
    variant = load_config(CONFIG).bases["wide_top"].variant(WIDE_TOP)
    solo = one_process(variant, 36)
    assert (solo.workers, solo.training.batch_size) == (1, variant.training.batch_size * variant.workers)
    assert solo.training.epochs == 36  # the schedule's length: bakeoff's plan's max_epochs
    unchanged = dataclasses.replace(
        solo.training, batch_size=variant.training.batch_size, epochs=variant.training.epochs
    )
    assert unchanged == variant.training  # flips, shift, EMA, steps per execution, optimizer, schedule
    assert solo.training.random_flip and solo.training.random_shift and solo.training.ema_momentum
    assert solo.model == variant.model


@pytest.mark.unit
def test_a_peer_process_runs_on_tcmalloc_with_one_replicas_threads_on_every_core():
    env = peer_environment()
    assert allocator.tcmalloc() in env["LD_PRELOAD"].split()  # the machine has it: test_worker checks the replicas'
    assert env["TF_NUM_INTRAOP_THREADS"] == env["TF_NUM_INTEROP_THREADS"] == str(os.cpu_count())
    assert "TF_CONFIG" not in env


def _outcomes(tool: str, accuracies: list[float]) -> list[Outcome]:
    return [Outcome(tool, seed, "cnn", a, 900.0, 9, 20, True, seed == 0) for seed, a in enumerate(accuracies)]


@pytest.mark.unit
def test_bakeoff_misses_its_goal_when_a_peers_mean_is_higher_though_bakeoff_wins_most_contests():
    tools = {
        "bakeoff": _outcomes("bakeoff", [0.93, 0.93, 0.89]),  # wins seeds 0 and 1, loses seed 2 by more
        "keras-tuner": _outcomes("keras-tuner", [0.92, 0.92, 0.92]),
        "optuna": _outcomes("optuna", [0.91, 0.91, 0.91]),
    }
    results = [[tools[tool][seed] for tool in tools] for seed in range(3)]
    found = {figure.key: figure for figure in figures(Size(), results)}
    assert found["peers_bakeoff_margin"].value == pytest.approx(0.9167 - 0.92, abs=1e-4)
    assert headline.met(found["peers_bakeoff_margin"]) is False
    assert found["peers_bakeoff_test_accuracy"].value == pytest.approx(0.9167, abs=1e-4)
    assert "sd 0.0231" in found["peers_bakeoff_test_accuracy"].detail
    assert headline.met(found["peers_contests"]) is True
    assert "seed(s) [0]" in found["peers_bakeoff_margin"].detail  # which contest's time includes calibrating


@pytest.mark.unit
def test_two_contests_are_too_few_for_the_goal():
    results = [[*_outcomes("bakeoff", [0.93]), *_outcomes("keras-tuner", [0.92]), *_outcomes("optuna", [0.91])]] * 2
    found = {figure.key: figure for figure in figures(Size(contests=2), results)}
    assert headline.met(found["peers_bakeoff_margin"]) is True
    assert headline.met(found["peers_contests"]) is False


@pytest.fixture(scope="module")
def trials(small_dataset: Path) -> Trials:
    return Trials(small_dataset, max_train_examples=1280, max_epochs=2)


def _shifted(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """``image`` moved by (dy, dx), background (0) filling what comes in: what a 1-pixel random shift may give."""
    padded = np.pad(image, [(1, 1), (1, 1), *[(0, 0)] * (image.ndim - 2)])
    return padded[1 - dy : 1 - dy + image.shape[0], 1 - dx : 1 - dx + image.shape[1]]


@pytest.mark.training
def test_a_peer_trial_trains_on_bakeoffs_flipped_and_shifted_batches(trials: Trials) -> None:
    drawn = trials.variant(load_config(CONFIG), "wide_top", WIDE_TOP)
    plain = dataclasses.replace(drawn, training=dataclasses.replace(drawn.training, random_flip=False, random_shift=0))

    def first_batch(variant) -> np.ndarray:
        images, _ = next(iter(trials.inputs(variant)))
        return trials.strategy.experimental_local_results(images)[0].numpy()

    augmented, original = first_batch(drawn), first_batch(plain)  # the same shuffle: the same images in order
    assert len(augmented) == drawn.training.batch_size == 128  # bakeoff's global batch, whole
    mirrored = moved = 0
    for out, image in zip(augmented, original, strict=True):
        views = {
            (flip, dy, dx)
            for flip, view in ((False, image), (True, image[:, ::-1]))
            for dy in (-1, 0, 1)
            for dx in (-1, 0, 1)
            if np.array_equal(out, _shifted(view, dy, dx))
        }
        assert views, "each image is the original, mirrored or not, moved at most a pixel each way"
        mirrored += all(flip for flip, _, _ in views)
        moved += all((dy, dx) != (0, 0) for _, dy, dx in views)
    assert 20 < mirrored < 108 and moved > 64  # about half mirrored, 8 of 9 moved


@pytest.mark.training
def test_a_peers_winner_is_scored_through_bakeoffs_export_mirror_averaged_where_it_trains_on_flips(
    trials: Trials, small_dataset: Path, tmp_path: Path
) -> None:
    flipped = trials.variant(load_config(CONFIG), "batch_norm", {})
    assert flipped.training.random_flip
    model = trials.compiled(flipped)  # untrained: an image and its mirror get different answers
    data = open_store(str(small_dataset))
    images, names = artifact.read_shards(data, "test").images[:300], artifact.read_metadata(data).class_names
    pixels = images.astype(np.float32)
    one, mirror = model(pixels, training=False).numpy(), model(pixels[:, :, ::-1], training=False).numpy()
    scored = served_probabilities(model, flipped, names, images, tmp_path / "flips")
    assert np.allclose(scored, (one + mirror) / 2, atol=1e-5)
    assert not np.allclose(scored, one, atol=1e-6)
    plain = dataclasses.replace(flipped, training=dataclasses.replace(flipped.training, random_flip=False))
    assert np.allclose(served_probabilities(model, plain, names, images, tmp_path / "plain"), one, atol=1e-5)
