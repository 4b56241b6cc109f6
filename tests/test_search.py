"""Search: spaces expanded into named variants, bad spaces in one line, the halving rungs, survivors, the budget,
`bakeoff plan`."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bakeoff.components import defaults
from bakeoff.components.defaults import CONFIG as DEFAULT_CONFIG
from bakeoff.components.environment import CPU_STAT_ENV, CPUINFO_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling.precision import AUTO, BFLOAT16, FLOAT32
from bakeoff.components.search import calibration, contention, costs
from bakeoff.components.search import calibration_cache as cache
from bakeoff.components.search.budget import epoch_seconds, estimate, fit, plan_config
from bakeoff.components.search.halving import Halving, schedule, survivors
from bakeoff.components.spec import Config, from_dict, load_config, load_variants
from bakeoff.components.steps.select import select
from bakeoff.components.storage import open_store
from bakeoff.components.storage.records import Score
from bakeoff.pipelines.cli.main import main
from tests import samples

pytestmark = pytest.mark.unit

SEARCH = """
defaults: {workers: 2, training: {epochs: 10, learning_rate: 0.002, schedule: cosine}}
variants:
  - name: cnn
    model: {type: cnn, filters: {choice: [[32, 64, 64], [64, 128, 128]]}, dense_units: {choice: [64, 128]},
            batch_norm: true, dropout: {uniform: [0.0, 0.5]}}
    training: {learning_rate: {log_uniform: [0.0005, 0.005]}}
  - name: grid
    model: {type: cnn, filters: {choice: [[16, 32], [32, 64]]}, dense_units: {choice: [32, 64, 128]}}
  - name: base
    model: {type: cnn, filters: [32, 64, 64], dense_units: 64}
search: {samples: 4, seed: SEED, halving: {min_epochs: 2, max_epochs: 15, eta: 3}}
"""


def write(tmp_path: Path, text: str, name: str = "search.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refused(path: Path, message: str) -> None:
    """Reading ``path`` fails with exactly one line: the file, then ``message``."""
    with pytest.raises(BakeoffError) as error:
        load_config(path)
    assert str(error.value) == f"{path}: {message}"


def names(path: Path) -> list[str]:
    return [variant.name for variant in load_variants(path)]


def test_sampling_is_deterministic_for_a_seed_and_differs_for_another(tmp_path: Path) -> None:
    first = names(write(tmp_path, SEARCH.replace("SEED", "0"), "a.yaml"))
    again = names(write(tmp_path, SEARCH.replace("SEED", "0"), "b.yaml"))
    other = names(write(tmp_path, SEARCH.replace("SEED", "1"), "c.yaml"))
    assert first == again
    sampled = [name for name in first if name.startswith("cnn-")]
    assert len(sampled) == 4 and len(set(sampled)) == 4
    assert sampled != [name for name in other if name.startswith("cnn-")]
    # The grid and the baseline do not depend on the seed.
    assert [n for n in first if not n.startswith("cnn-")] == [n for n in other if not n.startswith("cnn-")]


def test_a_variant_s_samples_do_not_depend_on_the_other_variants(tmp_path: Path) -> None:
    alone = names(write(tmp_path, SEARCH.replace("SEED", "0"), "a.yaml"))
    text = SEARCH.replace("SEED", "0").replace(
        "variants:\n",
        "variants:\n  - {name: first, model: {type: mlp, hidden_units: {choice: [[64], [128]]}, dropout: {uniform: "
        "[0.0, 0.4]}}}\n",
    )
    crowded = names(write(tmp_path, text, "b.yaml"))
    assert [n for n in crowded if n.startswith("cnn-")] == [n for n in alone if n.startswith("cnn-")]


def test_fewer_samples_are_the_first_draws_of_more(tmp_path: Path) -> None:
    eight = names(write(tmp_path, SEARCH.replace("SEED", "0").replace("samples: 4", "samples: 8"), "a.yaml"))
    three = names(write(tmp_path, SEARCH.replace("SEED", "0").replace("samples: 4", "samples: 3"), "b.yaml"))
    assert [n for n in three if n.startswith("cnn-")] == [n for n in eight if n.startswith("cnn-")][:3]


def test_samples_carry_their_values_in_the_spec_and_the_name(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, SEARCH.replace("SEED", "0")))
    for variant in config.variants:
        values = config.expansions[variant.name].values
        if config.expansions[variant.name].base != "cnn":
            continue
        assert 0.0005 <= variant.training.learning_rate <= 0.005 and 0 <= variant.model["dropout"] <= 0.5
        assert variant.model["filters"] in ([32, 64, 64], [64, 128, 128]) and variant.model["dense_units"] in (64, 128)
        assert values == {
            "model.filters": variant.model["filters"],
            "model.dense_units": variant.model["dense_units"],
            "model.dropout": variant.model["dropout"],
            "training.learning_rate": variant.training.learning_rate,
        }
        assert variant.model["batch_norm"] is True  # fixed fields stay as written
        text = lambda v: str(v).replace(".", "p")  # noqa: E731
        assert variant.name == (
            f"cnn-f{'_'.join(map(str, variant.model['filters']))}-du{variant.model['dense_units']}"
            f"-d{text(variant.model['dropout'])}-lr{text(variant.training.learning_rate)}"
        )


def test_choices_alone_expand_to_their_grid_in_order(tmp_path: Path) -> None:
    variants = [v for v in load_variants(write(tmp_path, SEARCH.replace("SEED", "0"))) if v.name.startswith("grid-")]
    assert [(v.model["filters"], v.model["dense_units"]) for v in variants] == [
        ([16, 32], 32),
        ([16, 32], 64),
        ([16, 32], 128),
        ([32, 64], 32),
        ([32, 64], 64),
        ([32, 64], 128),
    ]
    assert [v.name for v in variants] == [
        "grid-f16_32-du32",
        "grid-f16_32-du64",
        "grid-f16_32-du128",
        "grid-f32_64-du32",
        "grid-f32_64-du64",
        "grid-f32_64-du128",
    ]


def test_a_variant_without_a_space_is_unchanged_and_halving_sets_every_schedule(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, SEARCH.replace("SEED", "0")))
    plain = load_variants(
        write(
            tmp_path,
            "defaults: {workers: 2, training: {epochs: 15, learning_rate: 0.002, schedule: cosine}}\n"
            "variants:\n  - {name: base, model: {type: cnn, filters: [32, 64, 64], dense_units: 64}}\n",
            "plain.yaml",
        )
    )
    assert [v for v in config.variants if v.name == "base"] == plain
    assert {v.training.epochs for v in config.variants} == {15}  # max_epochs, not the 10 of defaults
    assert config.search is not None and config.search.halving == Halving(2, 15, 3)
    assert len(config.variants) == 4 + 6 + 1


def test_without_halving_variants_train_their_epochs_and_choice_takes_strings(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "variants:\n  - {name: a, model: {type: mlp}, training: {epochs: 4, optimizer: {choice: [adam, sgd]},"
            " random_flip: {choice: [true, false]}}, workers: {int_uniform: [1, 3]}}\n"
            "search: {samples: 3, seed: 5}\n",
        )
    )
    assert config.search is not None and config.search.halving is None
    assert {v.training.epochs for v in config.variants} == {4}
    assert len(config.variants) == 3
    assert all(
        v.name == f"a-o{v.training.optimizer}-rf{int(v.training.random_flip)}-w{v.workers}" for v in config.variants
    )


def test_a_space_in_defaults_applies_to_every_variant_unless_one_replaces_it(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "defaults: {training: {learning_rate: {log_uniform: [0.0001, 0.0002]}}}\nvariants:\n"
            "  - {name: a, model: {type: mlp}}\n"
            "  - {name: b, model: {type: mlp}, training: {learning_rate: {uniform: [0.003, 0.004]}}}\n"
            "  - {name: c, model: {type: mlp}, training: {learning_rate: 0.001}}\n"
            "search: {samples: 2}\n",
        )
    )
    rates = {v.name.split("-")[0]: v.training.learning_rate for v in config.variants}
    assert [v.name.split("-")[0] for v in config.variants] == ["a", "a", "b", "b", "c"]
    assert 0.0001 <= rates["a"] <= 0.0002 and 0.003 <= rates["b"] <= 0.004 and rates["c"] == 0.001


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        (
            "model: {type: cnn, dropout: {uniform: [0.5, 0.1]}}",
            "model.dropout: uniform needs low < high, got [0.5, 0.1]: for one value write it plainly",
        ),
        (
            "model: {type: cnn, dropout: {uniform: [0.3, 0.3]}}",
            "model.dropout: uniform needs low < high, got [0.3, 0.3]: for one value write it plainly",
        ),
        (
            "model: {type: cnn}, training: {learning_rate: {log_uniform: [0, 0.01]}}",
            "training.learning_rate: log_uniform needs bounds above 0, got [0, 0.01]",
        ),
        (
            "model: {type: cnn, dense_units: {choice: []}}",
            "model.dense_units: choice takes a non-empty list of values, got []",
        ),
        ("model: {type: cnn, dense_units: {choice: [64, 64]}}", "model.dense_units: choice lists 64 twice"),
        (
            "model: {type: cnn, dropout: {normal: [0.1, 0.2]}}",
            "model.dropout: unknown search space 'normal' (known: choice, uniform, log_uniform, int_uniform)",
        ),
        (
            "model: {type: cnn, dropout: {uniform: [0.1, 0.2], choice: [0.3]}}",
            "model.dropout: one search space per field, got uniform, choice",
        ),
        (
            "model: {type: cnn, dropout: {uniform: [0.1]}}",
            "model.dropout: uniform takes [low, high], two finite numbers, got [0.1]",
        ),
        (
            "model: {type: {choice: [cnn, mlp]}}",
            "model.type: a search space cannot pick the architecture: write one variant per type",
        ),
        (
            "model: {type: cnn}, training: {optimizer: {uniform: [0, 1]}}",
            "training.optimizer: uniform does not fit this field (str): use choice",
        ),
        (
            "model: {type: cnn, dense_units: {uniform: [32, 128]}}",
            "model.dense_units: uniform does not fit this field (int): use choice or int_uniform",
        ),
        (
            "model: {type: cnn, filters: {int_uniform: [32, 64]}}",
            "model.filters: int_uniform does not fit this field (list): use choice",
        ),
        (
            "model: {type: cnn, dense_units: {int_uniform: [32.5, 64]}}",
            "model.dense_units: int_uniform takes whole numbers, got [32.5, 64]",
        ),
        (
            "model: {type: cnn}, resources: {cpu: {choice: ['1', '2']}}",
            "resources.cpu: resources are not searched: they size the pods, not the model",
        ),
        # Each choice and both bounds go through the strict parser, named where they are written.
        ("model: {type: cnn, dropout: {uniform: [0.0, 1.0]}}", "model.dropout: must be in [0, 1), got 1.0"),
        ("model: {type: cnn, filters: {choice: [64, 128]}}", "model.filters: expected a list, got 64"),
        ("model: {type: cnn, dense_units: {int_uniform: [0, 64]}}", "model.dense_units: must be at least 1, got 0"),
        (
            "model: {type: cnn}, training: {schedule: {choice: [cosine, linear]}}",
            "training.schedule: unknown schedule 'linear' (known: constant, cosine, exponential)",
        ),
        (
            "model: {type: cnn}, training: {epochs: {int_uniform: [2, 5]}}",
            "training.epochs: search.halving trains every variant to its max_epochs: remove this search space",
        ),
        (
            "model: {type: cnn, filters: {choice: [[8], [9], [10], [11], [12], [13], [14]]}, kernel_size: {choice: "
            "[1, 2, 3, 4, 5, 6]},"
            " dense_units: {choice: [1, 2, 3, 4, 5, 6, 7]}}",
            "model.filters × model.kernel_size × model.dense_units: the grid gives 294 variants, more than 256: list "
            "fewer choices, or add a uniform space and sample",
        ),
    ],
)
def test_a_malformed_space_is_one_line_naming_file_variant_and_field(
    tmp_path: Path, variant: str, message: str
) -> None:
    refused(
        write(
            tmp_path, f"variants:\n  - {{name: a, {variant}}}\nsearch: {{halving: {{min_epochs: 1, max_epochs: 3}}}}\n"
        ),
        f"variant 'a': {message}",
    )


@pytest.mark.parametrize(
    ("search", "message"),
    [
        ("{samplez: 3}", "search.samplez: unknown field (known: samples, seed, halving, budget)"),
        ("{samples: 0}", "search.samples: must be at least 1, got 0"),
        ("{halving: {min_epochs: 2, max_epochs: 15, eta: 1}}", "search.halving.eta: must be at least 2, got 1"),
        ("{halving: {min_epochs: 5, max_epochs: 3}}", "search.halving.max_epochs: must be at least 5, got 3"),
        ("{halving: {min_epochs: 0, max_epochs: 3}}", "search.halving.min_epochs: must be at least 1, got 0"),
        ("{halving: {max_epochs: 3}}", "search.halving.min_epochs: required field is missing"),
        ("{budget: {minutes: 0}}", "search.budget.minutes: must be above 0 and at most 10080 (a week), got 0.0"),
        ("{budget: {hours: 1}}", "search.budget.hours: unknown field (known: minutes)"),
        ("[1, 2]", "search: expected a mapping, got [1, 2]"),
    ],
)
def test_a_malformed_search_section_is_one_line(tmp_path: Path, search: str, message: str) -> None:
    refused(write(tmp_path, f"variants:\n  - {{name: a, model: {{type: mlp}}}}\nsearch: {search}\n"), message)


@pytest.mark.parametrize(
    ("count", "halving", "rungs"),
    [
        (27, Halving(2, 15, 3), [(2, 27, 9), (6, 9, 3), (15, 3, 1)]),
        (13, Halving(2, 15, 3), [(2, 13, 5), (6, 5, 2), (15, 2, 1)]),  # a third, rounded up
        (8, Halving(2, 15, 3), [(2, 8, 3), (6, 3, 1), (15, 1, 1)]),
        # the budgeted default's 5: rung 0 keeps 2, not one that the earliest ranking alone would pick
        (5, Halving(3, 20, 3), [(3, 5, 2), (9, 2, 1), (20, 1, 1)]),
        (16, Halving(1, 8, 2), [(1, 16, 8), (2, 8, 4), (4, 4, 2), (8, 2, 1)]),
        (81, Halving(1, 100, 3), [(1, 81, 27), (3, 27, 9), (9, 9, 3), (27, 3, 1), (100, 1, 1)]),
        (10, Halving(5, 15, 3), [(5, 10, 4), (15, 4, 1)]),  # the second rung reaches max_epochs and keeps 1 of 4
        (40, Halving(4, 12, 4), [(4, 40, 10), (12, 10, 1)]),
        (5, Halving(4, 4, 3), [(4, 5, 1)]),  # min_epochs == max_epochs: one rung
        (1, Halving(2, 15, 3), [(15, 1, 1)]),  # a single variant goes straight to max_epochs
        (2, Halving(2, 15, 3), [(2, 2, 1), (15, 1, 1)]),  # fewer than eta still keeps one
    ],
)
def test_the_rung_schedule(count: int, halving: Halving, rungs: list[tuple[int, int, int]]) -> None:
    got = schedule(count, halving)
    assert [(r.epochs, r.entering, r.keep) for r in got] == rungs
    assert [r.index for r in got] == list(range(len(rungs)))


def test_a_rungs_score_averages_only_the_validated_epochs_of_its_last_third() -> None:
    """With validation_freq 2 a 12-epoch history holds epochs 2, 4, ..., 12: the last third is epochs 9-12, so 10 and
    12."""
    from bakeoff.components.search.halving import rung_score

    history = {"val_accuracy": [0.1, 0.2, 0.3, 0.4, 0.6, 0.8], "val_epochs": [2, 4, 6, 8, 10, 12]}
    assert rung_score(history, "val_accuracy", 12) == pytest.approx((0.7, 9))
    assert rung_score({"val_accuracy": [0.5, 0.7], "val_epochs": [1, 2]}, "val_accuracy", 2) == (
        0.7,
        2,
    )  # under 3 epochs: the last


def test_survivors_follow_the_metric_s_direction_and_ties_go_by_name() -> None:
    scores = {"b": (0.30, 0.90), "a": (0.30, 0.88), "c": (0.25, 0.91), "d": (math.nan, 0.95), "e": (0.50, 0.80)}
    losses = [Score(name, "val_loss", loss) for name, (loss, _) in scores.items()]
    accuracies = [Score(name, "val_accuracy", accuracy) for name, (_, accuracy) in scores.items()]
    assert survivors(losses, 2, "val_loss") == (["c", "a"], ["b", "e", "d"])  # lowest first; NaN (diverged) last
    assert survivors(accuracies, 2, "val_accuracy") == (["d", "c"], ["b", "a", "e"])
    with pytest.raises(BakeoffError, match="unknown selection metric 'accuracy'"):
        survivors([Score("a", "accuracy", 1.0)], 1, "accuracy")


def test_the_estimate_costs_each_rung_s_new_epochs_for_the_costliest_entrants(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "variants:\n  - {name: small, model: {type: mlp}}\n  - {name: mid, model: {type: cnn, filters: [8, 16]}}\n"
            "  - {name: big, model: {type: cnn, filters: [64, 128, 128]}}\n"
            "search: {halving: {min_epochs: 2, max_epochs: 6, eta: 3}}\n",
        )
    )
    measured = samples.calibration(
        config, start_seconds=10.0, task_seconds=1.0, select_task_seconds=3.0, ingest_seconds=5.0
    )
    small, mid, big = sorted(epoch_seconds(v, 1000, measured) for v in config.variants)
    assert small <= mid < big
    rungs, seconds = estimate(config, 1000, measured)
    assert [(r.epochs, r.entering, r.keep) for r in rungs or []] == [(2, 3, 1), (6, 1, 1)]
    # Rung 0: all three for 2 epochs; rung 1: the one survivor, costed as the costliest, for the 4 epochs it has not
    # done. Each of the 4 jobs starts (10 s) in a pipeline step (1 s); check, ingest and one halve are 3 steps more,
    # ingest builds the data (5 s), and select starts a step that imports TensorFlow (3 s), then as a job does (10 s).
    around = 3 * 1.0 + 5.0 + 3.0 + 10.0
    assert seconds == pytest.approx((small + mid + big) * 2 + big * 4 + 4 * 11.0 + around)
    # As a lower bound, the cheapest survives.
    assert estimate(config, 1000, measured, costliest=False)[1] == pytest.approx(
        (small + mid + big) * 2 + small * 4 + 4 * 11.0 + around
    )
    plain = dataclasses.replace(config, search=None)  # no halve step
    assert estimate(plain, 1000, measured) == pytest.approx((None, (small + mid + big) * 6 + 3 * 11.0 + around - 1.0))


def test_an_epoch_is_its_steps_at_the_measured_step_scaled_by_macs(tmp_path: Path) -> None:
    """The network measured costs its steps and its epoch's end; with one measured, a CNN of other filters costs in
    proportion to MACs."""
    config = load_config(
        write(
            tmp_path,
            "variants:\n  - {name: probe, model: {type: cnn}, training: {batch_size: 50}, workers: 2}\n"
            "  - {name: wide, model: {type: cnn, filters: [64, 128, 128]}, training: {batch_size: 50}, workers: 2}\n",
        )
    )
    measured = samples.calibration(config, step_seconds=0.2, epoch_end_seconds=0.5)
    probe, wide = config.variants
    # 1000 examples in global batches of 100, then validation and the backup
    assert epoch_seconds(probe, 1000, measured) == pytest.approx(10 * 0.2 + 0.5)
    assert epoch_seconds(probe, 1099, measured) == pytest.approx(10 * 0.2 + 0.5)  # the worker drops the last part batch
    ratio = costs.macs(wide) / costs.macs(probe)
    assert ratio > 3
    assert epoch_seconds(wide, 1000, measured) == pytest.approx((10 * 0.2 + 0.5) * ratio)


# Three plain CNNs of one shape, by MACs: small, mid, wide.
THREE_SIZES = """
defaults: {training: {batch_size: 50}, workers: 2}
variants:
  - {name: small, model: {type: cnn}}
  - {name: mid, model: {type: cnn, filters: [48, 96, 96]}}
  - {name: wide, model: {type: cnn, filters: [64, 128, 128]}}
"""


def test_with_two_networks_measured_a_step_is_on_their_line(tmp_path: Path) -> None:
    """A step has a part that does not grow with the network: two measured networks give the line between them."""
    config = load_config(write(tmp_path, THREE_SIZES))
    small, mid, wide = config.variants
    assert [variant.name for variant in costs.timed(config.variants)] == ["small", "wide"]
    shape = costs.shape_of(small)
    measured = dataclasses.replace(
        samples.calibration(config),
        steps=[
            costs.StepCost("cnn", False, 50, 2, 64, 1, costs.macs(small), 0.1, 0.5),
            costs.StepCost("cnn", False, 50, 2, 64, 1, costs.macs(wide), 0.3, 1.5),
        ],
    )
    assert measured.step_seconds(shape, costs.macs(small)) == pytest.approx(0.1)
    assert measured.step_seconds(shape, costs.macs(wide)) == pytest.approx(0.3)  # not 0.1 × the ratio of MACs (> 0.38)
    share = (costs.macs(mid) - costs.macs(small)) / (costs.macs(wide) - costs.macs(small))
    assert epoch_seconds(mid, 1000, measured) == pytest.approx(10 * (0.1 + 0.2 * share) + (0.5 + 1.0 * share))
    assert measured.step_seconds(shape, 2 * costs.macs(wide)) > 0.3  # beyond the costliest, the line goes on
    assert measured.missing(costs.timed(config.variants)) == []  # mid is costed on the line, not measured
    only_small = dataclasses.replace(measured, steps=measured.steps[:1])
    assert [variant.name for variant in only_small.missing(costs.timed(config.variants))] == ["wide"]


def test_the_default_s_draws_are_timed_beside_the_seed_network_they_widen() -> None:
    """`wide_top`'s wider head adds parameters whose optimizer updates MACs do not count (1.21× the seed's MACs,
    1.24–1.36× its step): the calibration times its costliest draw, so the first plan does not price it by MACs."""
    timed = costs.timed(load_config(DEFAULT_CONFIG).variants)
    assert [variant.name for variant in timed[:2]] == ["cnn", "batch_norm"] and len(timed) == 3
    assert timed[2].name.startswith("wide_top-du256-")


def test_with_three_networks_measured_a_step_is_on_the_segment_it_lies_in(tmp_path: Path) -> None:
    """A network measured between two others (a run's job) bends the line: a step is priced between its neighbours."""
    config = load_config(write(tmp_path, THREE_SIZES))
    small, mid, wide = (costs.macs(variant) for variant in config.variants)
    shape = costs.shape_of(config.variants[0])
    measured = dataclasses.replace(
        samples.calibration(config),
        steps=[costs.StepCost.of(shape, 1, m, seconds, 0.5) for m, seconds in ((small, 0.1), (wide, 0.3), (mid, 0.25))],
    )
    between = (small + mid) // 2
    assert measured.step_seconds(shape, mid) == pytest.approx(0.25)  # not on the line through the ends
    assert measured.step_seconds(shape, between) == pytest.approx(0.1 + 0.15 * (between - small) / (mid - small))
    assert measured.step_seconds(shape, 2 * wide) == pytest.approx(0.3 + 0.05 * (2 * wide - wide) / (wide - mid))


def test_a_run_s_jobs_price_their_networks_in_the_next_plan(tmp_path: Path, cost_cache: Path) -> None:
    """After a local run, the median of each network's steady jobs replaces the cached step of its shape within the
    tolerance; networks the run did not train keep theirs; a job too short to time says nothing."""
    config = load_config(
        write(
            tmp_path,
            "defaults: {workers: 2}\nvariants:\n  - {name: plain, model: {type: cnn}}\n"
            "  - {name: normed, model: {type: cnn, batch_norm: true}}\n"
            "  - {name: wide, model: {type: cnn, batch_norm: true, filters: [64, 128, 128]}}\n",
        )
    )
    plain, normed = config.variants[:2]  # the third, wide, is normed's costliest network
    cached = samples.cache_calibration(cost_cache, config, step_seconds=0.05)
    store = open_store(f"file://{tmp_path / 'store'}")

    def job(variant: str, rung: int, examples_per_second: float, steady: bool = True) -> None:
        samples.store_job(
            store,
            "r1",
            variant,
            rung,
            global_batch_size=128,
            steps_per_epoch=232,  # 2 epochs: 464 steps, 400 of them after the first execution of 64
            examples_per_second=examples_per_second,
            examples_per_second_steady=steady,
            epochs_trained=2,
            validation_seconds=0.6,
            backup_seconds=0.2,
        )

    job("plain", 0, 5120.0)
    job("plain", 1, 6400.0)
    job("plain", 2, 12800.0)  # the newest, in a fast spell of the host: the median of the three prices the network
    job("normed", 0, 1.0, steady=False)  # one execution: its rate includes the trace
    assert calibration.refresh(store, "r1", config.variants, concurrent_jobs=2).calibration is None  # sharing cores
    assert cache.read(cost_cache / cache.FILE) == cached
    refreshed = calibration.refresh(store, "r1", config.variants, concurrent_jobs=1).calibration
    assert refreshed is not None and cache.read(cost_cache / cache.FILE) == refreshed
    (ran,) = refreshed.costs(costs.shape_of(plain))
    # 128 / 6400 s a step in the steady window, less the two backups it held over its 400 steps
    assert ran.step_seconds == pytest.approx(0.02 - 0.2 / 400)
    assert (ran.epoch_end_seconds, ran.measured_by) == (0.4, "run r1")
    assert refreshed.costs(costs.shape_of(normed)) == cached.costs(costs.shape_of(normed))  # untouched
    (cost_cache / cache.FILE).unlink()
    assert calibration.refresh(store, "r1", config.variants, concurrent_jobs=1).calibration is None  # none to fold into
    assert not (cost_cache / cache.FILE).exists()


def test_a_run_at_another_steps_per_execution_prices_its_own_setting_only(tmp_path: Path, cost_cache: Path) -> None:
    """Issue 49's quick try trained the seed CNNs at 16 steps an execution: each call into the graph then carries a
    quarter of the steps it carries at the default's 64, and costs more a step. Its step lands beside the calibration's
    of 64, which goes on pricing the default's networks as measured, and says how many steps it timed."""
    config = load_config(
        write(tmp_path, "defaults: {workers: 2}\nvariants:\n  - {name: cnn, model: {type: cnn}}\n", "cnn.yaml")
    )
    (variant,) = config.variants
    sixteen = dataclasses.replace(variant, training=dataclasses.replace(variant.training, steps_per_execution=16))
    assert costs.shape_of(sixteen) != costs.shape_of(variant)
    cached = samples.cache_calibration(cost_cache, config, step_seconds=0.0193)
    store = open_store(f"file://{tmp_path / 'store'}")
    timed = 400 - 16  # one epoch of 400 steps, less its first execution
    samples.store_job(
        store,
        "r1",
        "cnn",
        0,
        workers=2,
        global_batch_size=128,
        steps_per_epoch=400,
        epochs=1,
        epochs_trained=1,
        examples_per_second=128 / 0.0298,
        examples_per_second_steady=True,
        backup_seconds=0.0,
    )
    refreshed = calibration.refresh(store, "r1", [sixteen], concurrent_jobs=1)
    assert refreshed.kept == [f"cnn at 29.8 ms a step (new; over {timed} steady steps)"] and not refreshed.left
    assert refreshed.calibration is not None
    assert refreshed.calibration.costs(costs.shape_of(variant)) == cached.costs(costs.shape_of(variant))
    (beside,) = refreshed.calibration.costs(costs.shape_of(sixteen))
    assert beside.step_seconds == pytest.approx(0.0298) and beside.steps_per_execution == 16
    assert epoch_seconds(variant, 55000, refreshed.calibration) == epoch_seconds(variant, 55000, cached)


def test_batch_norm_is_a_family_of_its_own(tmp_path: Path) -> None:
    """BatchNormalization's work grows with activations, not MACs: a network with it is timed apart from one without,
    and costs its own measured step."""
    config = load_config(
        write(
            tmp_path,
            "variants:\n  - {name: plain, model: {type: cnn}}\n"
            "  - {name: normed, model: {type: cnn, batch_norm: true}}\n",
        )
    )
    plain, normed = config.variants
    assert costs.macs(plain) == costs.macs(normed) and costs.shape_of(plain) != costs.shape_of(normed)
    assert [variant.name for variant in costs.timed(config.variants)] == ["plain", "normed"]
    measured = dataclasses.replace(
        samples.calibration(config),
        steps=[
            costs.StepCost.of(costs.shape_of(v), 1, costs.macs(v), step, 10 * step)
            for v, step in zip((plain, normed), (0.1, 0.2), strict=True)
        ],
    )
    assert epoch_seconds(normed, 3200, measured) == pytest.approx(2 * epoch_seconds(plain, 3200, measured))


def test_each_network_s_job_starts_as_measured_and_a_run_s_steps_keep_it(tmp_path: Path) -> None:
    """A job's start is its own network's as timed: a backbone's took 27-51 s here and a resnet's 6, and one median
    of both had priced every Fashion-MNIST job at 17.9 s (issue 59). A network timed without one falls back to the
    calibration's; a run's steps that refresh a network keep its measured start."""
    config = families(tmp_path, 10000.0)
    small, mid, costly = config.variants
    measured = samples.calibration(config)
    starts = {"cnnFalse": 4.0, "cnnTrue": 8.0, "mlpFalse": 0.0}
    timed = dataclasses.replace(
        measured,
        start_seconds=30.0,
        steps=[
            dataclasses.replace(step, start_seconds=starts[step.shape.architecture + str(step.shape.batch_norm)])
            for step in measured.steps
        ],
    )
    assert timed.job_start([small]) == 4.0 and timed.job_start([small, mid]) == 6.0
    assert timed.job_start([costly]) == 30.0  # none measured for its network
    only = dataclasses.replace(config, variants=[small], expansions={"small": config.expansions["small"]})
    faster = dataclasses.replace(timed, steps=[dataclasses.replace(s, start_seconds=1.0) for s in timed.steps])
    jobs = sum(rung.entering for rung in estimate(only, 55000, timed)[0] or [])
    assert estimate(only, 55000, timed)[1] - estimate(only, 55000, faster)[1] == pytest.approx(3.0 * jobs)
    (cnn,) = [step for step in timed.steps if step.shape == costs.shape_of(small)]
    run = dataclasses.replace(cnn, step_seconds=cnn.step_seconds * 2, start_seconds=0.0, measured_by="run r1")
    refreshed = costs.folded(timed, [run])
    assert refreshed.job_start([small]) == 4.0 and refreshed.step_seconds(cnn.shape, cnn.macs) == run.step_seconds


def test_an_epoch_s_end_is_priced_by_the_validation_examples_the_data_has(tmp_path: Path) -> None:
    """Each epoch scores the data's validation split: a folder's 960 cost a fifth of the 5,000 the calibration
    scored, where one price for both had made a 64x64 epoch of a resnet 5.1 s longer than its steps (issue 59). A
    run's job that scored its own split prices the end in proportion too."""
    config = families(tmp_path, 10000.0)
    small = config.variants[0]
    measured = samples.calibration(config, epoch_end_seconds=5.0)
    folder = dataclasses.replace(costs.FASHION_MNIST, validation=1000)
    steps_only = epoch_seconds(small, 55000, measured, folder) - 1.0
    assert epoch_seconds(small, 55000, measured) == pytest.approx(steps_only + 5.0)
    (cnn,) = [step for step in measured.steps if step.shape == costs.shape_of(small)]
    run = dataclasses.replace(
        cnn, step_seconds=cnn.step_seconds * 2, epoch_end_seconds=1.0, validation_examples=1000, measured_by="run r1"
    )
    assert epoch_seconds(small, 55000, costs.folded(measured, [run])) == pytest.approx(2 * steps_only + 5.0)


def budgeted(tmp_path: Path, minutes: float, samples: int = 8) -> Path:
    text = SEARCH.replace("SEED", "0").replace("samples: 4", f"samples: {samples}")
    return write(
        tmp_path, text.replace("eta: 3}", f"eta: 3}}, budget: {{minutes: {minutes!r}}}"), f"budget-{minutes}.yaml"
    )


def test_a_budget_drops_draws_first(tmp_path: Path) -> None:
    three = load_config(budgeted(tmp_path, 10000.0, samples=3))
    measured = samples.calibration(three)
    minutes = estimate(three, 55000, measured)[1] / 60 + 0.01  # just what three draws per variant cost
    plan = fit(load_config(budgeted(tmp_path, minutes)), measured)
    assert [v.name for v in plan.config.variants] == [
        v.name for v in three.variants
    ]  # the first three draws, grid and base kept
    assert plan.config.search is not None and plan.config.search.samples == 3
    assert plan.seconds <= minutes * 60
    assert len(plan.fitted) == 1 and plan.fitted[0].startswith(
        "search.samples 8 -> 3: 8 draws per sampled variant take an estimated "
    )
    assert plan.fitted[0].endswith(f", over the budget of {minutes:g} min")
    slower = dataclasses.replace(measured, start_seconds=measured.start_seconds * 2)
    assert fit(load_config(budgeted(tmp_path, minutes)), slower).config.search.samples < 3  # type: ignore[union-attr]


def without_draws(tmp_path: Path) -> Config:
    """SEARCH without its sampled variant: the grid and base variants alone."""
    drawn = SEARCH.split("  - name: grid")[0].split("variants:\n")[1]
    return load_config(write(tmp_path, SEARCH.replace(drawn, "").replace("SEED", "0"), "undrawn.yaml"))


def draws_priced(config: Config, measured: costs.Calibration, factor: float) -> costs.Calibration:
    """``measured`` with the steps of the shapes ``config`` draws from ``factor`` times as costly."""
    drawn = {costs.shape_of(v) for v in config.variants if config.expansions[v.name].sample is not None}
    return dataclasses.replace(
        measured,
        steps=[
            dataclasses.replace(step, step_seconds=step.step_seconds * factor) if step.shape in drawn else step
            for step in measured.steps
        ],
    )


def test_a_budget_drops_the_last_draw_rather_than_halve_the_search(tmp_path: Path) -> None:
    """A draw so costly that keeping one would leave every variant under half its epochs goes: the grid and base
    variants train their whole schedule instead."""
    undrawn, config = without_draws(tmp_path), load_config(budgeted(tmp_path, 10000.0))
    measured = samples.calibration(config)
    costly = draws_priced(config, measured, 20)
    minutes = estimate(undrawn, 55000, costly)[1] / 60 + 0.01  # what the search costs with no draws
    plan = fit(load_config(budgeted(tmp_path, minutes)), costly)
    assert [v.name for v in plan.config.variants] == [v.name for v in undrawn.variants]
    assert plan.config.search is not None and plan.config.search.samples == 0
    assert plan.config.search.halving == Halving(2, 15, 3)
    assert plan.seconds <= minutes * 60
    assert len(plan.fitted) == 1 and plan.fitted[0].startswith("search.samples 8 -> 0: ")
    assert plan.fitted[0].endswith(", none leaves it 15")
    roomier = estimate(to_epochs(undrawn, 17), 55000, costly)[1] / 60 + 0.01  # room for 2 more epochs
    grown = fit(load_config(budgeted(tmp_path, roomier)), costly)
    assert grown.config.search is not None and grown.config.search.samples == 0
    assert grown.config.search.halving == Halving(2, 17, 3)
    assert [line.split(":")[0] for line in grown.fitted] == [
        "search.samples 8 -> 0",
        "search.halving.max_epochs 15 -> 17",
    ]
    kept = fit(load_config(budgeted(tmp_path, minutes)), measured)  # a cheap draw stays
    assert kept.config.search is not None and kept.config.search.samples > 0


def test_a_budget_weighs_a_draw_against_the_epochs_the_search_grows_to_without_it(tmp_path: Path) -> None:
    """Room to spare grows a search without draws past its written max_epochs: one draw that keeps half the written
    epochs, but under half of those the grown search trains, goes."""
    config = load_config(budgeted(tmp_path, 10000.0))
    pricier = draws_priced(config, samples.calibration(config), 10)
    undrawn = without_draws(tmp_path)
    minutes = estimate(to_epochs(undrawn, 30), 55000, pricier)[1] / 60 + 0.01  # twice the written 15 epochs
    plan = fit(load_config(budgeted(tmp_path, minutes)), pricier)
    assert plan.config.search is not None and plan.config.search.samples == 0
    assert plan.config.search.halving == Halving(2, 30, 3)
    assert plan.fitted[0].startswith("search.samples 8 -> 0: ") and plan.fitted[0].endswith(", none leaves it 30")
    assert plan.fitted[1].startswith("search.halving.max_epochs 15 -> 30: ")


FAMILIES = """
defaults: {workers: 2, training: {epochs: 10}}
variants:
  - {name: small, model: {type: cnn, filters: [16, 32], dense_units: 32}}
  - {name: mid, model: {type: cnn, filters: [32, 64], dense_units: 64, batch_norm: true}}
  - {name: costly, model: {type: mlp, hidden_units: [64]}}
search: {halving: {min_epochs: 2, max_epochs: 12, eta: 3}, budget: {minutes: MINUTES}}
"""


def families(tmp_path: Path, minutes: float) -> Config:
    return load_config(write(tmp_path, FAMILIES.replace("MINUTES", repr(minutes)), f"families-{minutes}.yaml"))


def test_a_budget_leaves_out_the_costliest_variants_rather_than_train_everyone_one_epoch(tmp_path: Path) -> None:
    """Where the budget holds every variant only under half the epochs its cheapest one alone would train, the
    costliest variants an epoch go, the fewest that let the rest train that half: five networks cut to 1 epoch
    scored 0.21 on 64x64 shapes (issue 59). A budget that holds the search near its written epochs keeps them all."""
    config = families(tmp_path, 10000.0)
    small, mid, costly = config.variants
    measured = samples.calibration(config)
    by_name = {step.shape.architecture + str(step.shape.batch_norm): step for step in measured.steps}
    # each family is its own shape: price them 1x, 2x and 40x
    priced = dataclasses.replace(
        measured,
        steps=[
            dataclasses.replace(step, step_seconds=step.step_seconds * factor, epoch_end_seconds=0.1)
            for step, factor in zip(
                (by_name["cnnFalse"], by_name["cnnTrue"], by_name["mlpFalse"]), (1, 2, 40), strict=True
            )
        ],
    )
    two = dataclasses.replace(
        config, variants=[small, mid], expansions={name: config.expansions[name] for name in ("small", "mid")}
    )
    minutes = estimate(to_epochs(two, 8), 55000, priced)[1] / 60 + 0.01  # small and mid train 8 of 12 epochs
    plan = fit(families(tmp_path, minutes), priced)
    assert [v.name for v in plan.config.variants] == ["small", "mid"]
    assert plan.config.search is not None and plan.config.search.halving == Halving(2, 8, 3)
    assert plan.seconds <= minutes * 60
    (line, cut) = plan.fitted
    assert line.startswith("variants left out, the costliest an epoch: costly (") and line.endswith(" without them 8")
    assert cut.startswith("search.halving.max_epochs 12 -> 8: ")
    roomy = estimate(to_epochs(config, 11), 55000, priced)[1] / 60 + 0.01  # all three at 11 of 12 epochs
    kept = fit(families(tmp_path, roomy), priced)
    assert [v.name for v in kept.config.variants] == ["small", "mid", "costly"]
    assert [line.split(":")[0] for line in kept.fitted] == ["search.halving.max_epochs 12 -> 11"]
    assert costly.name == "costly"


def to_epochs(config: Config, epochs: int) -> Config:
    """A halving ``config`` with ``max_epochs`` set to ``epochs`` (its variants' epochs are what the plan costs by
    the rungs)."""
    assert config.search is not None and config.search.halving is not None
    halving = dataclasses.replace(config.search.halving, max_epochs=epochs)
    return dataclasses.replace(config, search=dataclasses.replace(config.search, halving=halving))


def test_a_budget_with_room_lengthens_the_halving_search_to_fill_it(tmp_path: Path) -> None:
    """Under its budget a halving search trains to the most epochs the budget holds, at most GROWN_EPOCHS_FACTOR
    times those written; exactly the written cost stays as written."""
    config = load_config(budgeted(tmp_path, 10000.0))
    measured = samples.calibration(config)
    assert config.search is not None and config.search.halving == Halving(2, 15, 3)
    at_18 = estimate(to_epochs(config, 18), 55000, measured)[1]
    plan = fit(load_config(budgeted(tmp_path, at_18 / 60 + 0.01)), measured)
    assert plan.config.search is not None and plan.config.search.halving == Halving(2, 18, 3)
    assert {v.training.epochs for v in plan.config.variants} == {18}
    assert [v.name for v in plan.config.variants] == [v.name for v in config.variants]
    assert plan.seconds == pytest.approx(at_18)
    assert len(plan.fitted) == 1 and plan.fitted[0].startswith("search.halving.max_epochs 15 -> 18: 15 epochs take")
    capped = fit(config, measured)
    assert capped.config.search is not None and capped.config.search.halving == Halving(2, 30, 3)
    as_written = estimate(config, 55000, measured)[1] / 60 + 0.001
    assert fit(load_config(budgeted(tmp_path, as_written)), measured).fitted == []


def test_a_budget_then_lowers_max_epochs_and_refuses_what_cannot_fit(tmp_path: Path) -> None:
    one = load_config(budgeted(tmp_path, 10000.0, samples=1))
    measured = samples.calibration(one)
    assert one.search is not None
    at_nine = dataclasses.replace(one, search=dataclasses.replace(one.search, halving=Halving(2, 9, 3)))
    minutes = estimate(at_nine, 55000, measured)[1] / 60 + 0.01
    plan = fit(load_config(budgeted(tmp_path, minutes)), measured)
    assert plan.config.search is not None and plan.config.search.samples == 1
    assert plan.config.search.halving == Halving(2, 9, 3)
    assert {v.training.epochs for v in plan.config.variants} == {9}
    assert [line.split(":")[0] for line in plan.fitted] == [
        "search.samples 8 -> 1",
        "search.halving.max_epochs 15 -> 9",
    ]
    path = budgeted(tmp_path, 0.01)
    with pytest.raises(
        BakeoffError,
        match=rf"^{path}: search.budget.minutes: 0.01 min cannot hold even 8 variants at 1 epoch"
        r" \(an estimated [0-9.]+ min here\): raise the budget or list fewer variants$",
    ):
        fit(load_config(path), measured)


def test_plan_prints_the_variants_the_rungs_and_the_estimate(
    tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write(tmp_path, SEARCH.replace("SEED", "0"))
    config = load_config(path)
    measured = samples.cache_calibration(cost_cache, config)
    assert main(["plan", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"11 variants from {path}:\n")
    for variant in config.variants:
        assert f"  {variant.name} " in out
    assert "model.filters=[64,128,128]" in out and "  base " in out and "(as written)" in out
    assert "successive halving (eta 3, epochs 2 to 15):\n  rung  epochs  entering  kept\n" in out
    assert "     0       2        11     4\n     1       6         4     2\n     2      15         2     1\n" in out
    least, most = (estimate(config, 55000, measured, costliest)[1] / 60 for costliest in (False, True))
    assert least < most
    assert (
        f"priced on {defaults.SOURCE}: 55,000 training examples of 28x28x1 pixels, 10 classes\n"
        f"estimated time: {least:.1f} to {most:.1f} min (the cheapest to the costliest variants surviving"
        " each rung); the jobs one at a time on 55,000 examples, with ingest, the jobs' starts and select"
    ) in out
    assert (
        f"\ncosts measured here at 2026-01-01T00:00:00+00:00 ({cache.machine_key()}): cnn of 0.779M MACs 50 ms/step,"
        " 1 s an epoch's end (batch 64, 2×1 threads), cnn of 3.42M MACs 219 ms/step, 4.4 s an epoch's end (batch 64,"
        " 2×1 threads), cnn with batch norm of 2.79M MACs 50 ms/step, 1 s an epoch's end (batch 64, 2×1 threads), cnn"
        " with batch norm of 10.8M MACs 193 ms/step, 3.9 s an epoch's end (batch 64, 2×1 threads); 10.0 s to start a"
        " job of a network not timed, 1.0 s a pipeline step (3.0 s select's), 5.0 s to ingest\n"
    ) in out
    assert main(["plan", "--config", str(path), "--json", "--max-train-examples", "1000"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [v["name"] for v in document["variants"]] == [v.name for v in config.variants]
    assert document["rungs"] == [
        {"index": 0, "epochs": 2, "entering": 11, "keep": 4},
        {"index": 1, "epochs": 6, "entering": 4, "keep": 2},
        {"index": 2, "epochs": 15, "entering": 2, "keep": 1},
    ]
    assert document["estimated_seconds"] < estimate(config, 55000, measured)[1]
    assert document["calibration"] == json.loads(measured.to_json())


def test_plan_s_estimate_is_the_cached_calibration_s_arithmetic(
    tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture
) -> None:
    """Two probe-sized variants of 3 epochs, 10 steps an epoch on 1000 examples: 60 steps, 6 epochs' ends and two
    starts."""
    path = write(
        tmp_path,
        "defaults: {training: {batch_size: 50, epochs: 3}, workers: 2}\n"
        "variants:\n  - {name: a, model: {type: mlp}}\n  - {name: b, model: {type: cnn}}\n",
    )
    samples.cache_calibration(
        cost_cache,
        load_config(path),
        step_seconds=0.25,
        epoch_end_seconds=0.5,
        start_seconds=7.0,
        task_seconds=2.0,
        select_task_seconds=5.0,
        ingest_seconds=4.0,
    )
    assert main(["plan", "--config", str(path), "--json", "--max-train-examples", "1000"]) == 0
    document = json.loads(capsys.readouterr().out)
    # Two jobs, each a pipeline step; check, ingest and select around them, select's step importing TensorFlow and
    # then starting as a job does.
    assert document["estimated_seconds"] == pytest.approx(
        2 * 3 * (10 * 0.25 + 0.5) + 2 * (7.0 + 2.0) + 2 * 2.0 + 4.0 + 5.0 + 7.0
    )
    assert document["least_seconds"] == document["estimated_seconds"]  # no halving: every variant trains its epochs
    assert document["calibration"]["start_seconds"] == 7.0
    assert [(s["architecture"], s["step_seconds"]) for s in document["calibration"]["steps"]] == [
        ("cnn", 0.25),
        ("mlp", 0.25),
    ]


def test_an_unreadable_calibration_is_measured_again(cost_cache: Path, capsys: pytest.CaptureFixture) -> None:
    (cost_cache / cache.FILE).write_text(f'{{"version": {costs.VERSION}, "machine": "x"}}')
    assert cache.read(cost_cache / cache.FILE) is None
    assert capsys.readouterr().err.startswith(
        f"bakeoff: measuring this machine's costs again: {cost_cache / cache.FILE}: is a Calibration record that lacks"
    )
    (cost_cache / cache.FILE).write_text("[]")
    assert cache.read(cost_cache / cache.FILE) is None
    assert "not a Calibration record" in capsys.readouterr().err


def test_an_older_cost_model_s_record_is_measured_again_without_a_complaint(
    tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture
) -> None:
    """Another cost model's record has other fields (version 3's steps lacked batch_norm): not an error to report."""
    config = load_config(write(tmp_path, "variants:\n  - {name: a, model: {type: cnn}}\n"))
    older = json.loads(dataclasses.replace(samples.calibration(config), version=costs.VERSION - 1).to_json())
    assert older["steps"]
    for step in older["steps"]:
        del step["batch_norm"]
    (cost_cache / cache.FILE).write_text(json.dumps(older))
    assert cache.read(cost_cache / cache.FILE) is None
    assert capsys.readouterr().err == ""


def test_the_machine_key_names_the_cpu_its_avx512_its_cores_and_tensorflow(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 avx512f\n\nprocessor\t: 1\n")
    with_avx512 = cache.machine_key(cpuinfo)
    assert with_avx512.startswith("Some CPU, avx512f, ") and f"cost model {costs.VERSION}" in with_avx512
    cpuinfo.write_text("model name\t: Some CPU\nflags\t\t: fpu avx2 avx512_vnni\n")
    assert cache.machine_key(cpuinfo).startswith("Some CPU, no avx512f, ")


def test_one_disturbed_calibration_job_does_not_set_every_job_s_start() -> None:
    """Two jobs started in 15-16 s and one, with a test running beside it, in 43 s: a job starts in ~16 s."""
    assert calibration.start_cost([15.9, 42.9, 15.2]) == 15.9
    assert calibration.start_cost([15.0, 16.0]) == 15.5 and calibration.start_cost([20.0]) == 20.0


def _modules_loaded_after(first: str, then: str) -> set[str]:
    """The modules ``then`` loads in a process that ran ``first``: the ones ``first`` alone leaves unloaded (one
    process, so one TensorFlow import)."""
    code = f"import sys\n{first}\nbefore = set(sys.modules)\n{then}\nprint(*set(sys.modules) - before)"
    return set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())


@pytest.mark.long_running
def test_select_s_step_is_priced_with_every_module_it_imports_before_its_work() -> None:
    """The calibration times a process running SELECT_IMPORTS as select's start: it must load all that select's own
    prologue (its statements before ``with reported()``) loads, or a heavier import there goes unpriced."""
    function = ast.parse(inspect.getsource(select)).body[0]
    assert isinstance(function, ast.FunctionDef)
    body = function.body[1:]  # after the docstring
    prologue = "\n".join(ast.unparse(node) for node in itertools.takewhile(lambda n: not isinstance(n, ast.With), body))
    assert "import_tensorflow()" in prologue
    assert _modules_loaded_after(calibration.SELECT_IMPORTS, prologue) == set()


@pytest.mark.training
def test_another_machine_s_calibration_is_measured_again(
    cost_cache: Path, fashion_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    """A record of another machine key holds nothing here: plan measures (a tiny workload) and replaces it."""
    mlp = from_dict({"name": "m", "model": {"type": "mlp"}, "training": {"batch_size": 16}, "workers": 1})
    elsewhere = dataclasses.replace(
        samples.calibration(start_seconds=99.0, task_seconds=99.0, select_task_seconds=99.0),
        machine="another CPU",
        steps=[costs.StepCost("mlp", False, 16, 1, 64, 1, costs.macs(mlp), 9.0, 9.0)],
    )
    (cost_cache / cache.FILE).write_text(elsewhere.to_json())
    measured = calibration.calibrated([mlp], str(fashion_dir), steps=2)
    assert measured.machine == cache.machine_key() and measured.measured_at > elsewhere.measured_at
    (cost,) = measured.steps
    assert (cost.shape, cost.macs) == (costs.shape_of(mlp), costs.macs(mlp))
    # measured here, each its own value: none is the other machine's (how long each took depends on the load)
    assert cost.step_seconds > 0 and cost.step_seconds != 9.0
    measured_starts = (measured.start_seconds, measured.task_seconds, measured.select_task_seconds)
    assert all(seconds > 0 and seconds != 99.0 for seconds in measured_starts)
    assert measured.task_seconds < measured.select_task_seconds  # select imports TensorFlow as well
    assert cache.read(cost_cache / cache.FILE) == measured
    assert calibration.calibrated([mlp], str(fashion_dir), steps=2) == measured  # cached now: nothing measured again
    out, err = capsys.readouterr()
    assert out == ""  # stdout holds the plan or run --json document alone: the calibration's ingest is silent there
    assert err.count("measuring this machine's training costs once") == 1
    assert err.count("bakeoff: timed m (1 of 1): ") == 1  # each calibration job says it ran


@pytest.mark.training
def test_a_run_s_first_measurement_keeps_to_its_share_of_the_budget(
    tmp_path: Path, cost_cache: Path, fashion_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    """A run's budget counts from its command's start, the measuring of this machine's costs included: past
    CALIBRATION_SHARE of it, no other network is timed, the variants left unpriced sit the run out, said in a line,
    and the plan fits what is left. Timing 5 networks at 64x64 had taken 14 min of a 5-min budget (issue 59)."""
    text = (
        f"source: {fashion_dir}\ndefaults: {{workers: 1, training: {{batch_size: 16}}}}\n"
        "variants:\n  - {name: first, model: {type: mlp}}\n  - {name: second, model: {type: cnn}}\n"
        "search: {halving: {min_epochs: 1, max_epochs: 3, eta: 3}, budget: {minutes: 100}}\n"
    )
    config = load_config(write(tmp_path, text))
    share = defaults.CALIBRATION_SHARE * 100 * 60
    plan, _ = plan_config(config, 2000, costs.FASHION_MNIST, frozenset(), started=time.monotonic() - share)
    assert [v.name for v in plan.config.variants] == ["first"]  # listed first, timed first; the share then spent
    assert plan.fitted[0] == (
        "variants left out, not timed within the 25% of the budget that measuring this machine's costs may take:"
        " second (`bakeoff plan` times them all, for the next run)"
    )
    assert plan.fitted[1].startswith("the budget's first 25") and plan.seconds <= 75 * 60
    (cost,) = cache.read(cost_cache / cache.FILE).steps  # type: ignore[union-attr]
    assert cost.architecture == "mlp" and cost.start_seconds > 0  # its own start kept beside its step
    assert "bakeoff: 1 of 2 networks left untimed: the budget's share for measuring is spent" in capsys.readouterr().err
    record = (cost_cache / cache.FILE).read_text()
    again, _ = plan_config(config, 2000, costs.FASHION_MNIST, frozenset(), started=time.monotonic() - share)
    # the search is priced in part: past its share no job is forced on it, and the part it prices runs
    assert [v.name for v in again.config.variants] == ["first"]
    assert not any(line.startswith("the budget's first") for line in again.fitted)
    assert (cost_cache / cache.FILE).read_text() == record and "measuring" not in capsys.readouterr().err
    later, _ = plan_config(config, 2000, costs.FASHION_MNIST, frozenset())  # a plan alone times the rest
    assert [v.name for v in later.config.variants] == ["first", "second"]
    assert {c.architecture for c in cache.read(cost_cache / cache.FILE).steps} == {"mlp", "cnn"}  # type: ignore[union-attr]


@pytest.mark.training
def test_costs_measured_beside_another_program_serve_one_plan_and_are_not_kept(
    cost_cache: Path, fashion_dir: Path, busy_cores: None, capsys: pytest.CaptureFixture
) -> None:
    """A calibration that shared the cores timed a slower machine than this one: the plan at hand uses it (it has
    nothing better), the cache keeps nothing, and the next plan measures again."""
    mlp = from_dict({"name": "m", "model": {"type": "mlp"}, "training": {"batch_size": 16}, "workers": 1})
    measured = calibration.calibrated([mlp], str(fashion_dir), steps=2)
    assert measured.machine == cache.machine_key() and len(measured.steps) == 1
    assert not (cost_cache / cache.FILE).exists()
    err = capsys.readouterr().err
    assert "of the cores while this machine's costs were measured: this plan uses them, the next one measures" in err


def test_a_program_beside_bakeoff_counts_as_others_use_of_the_cores(busy_cores: None, tmp_path: Path) -> None:
    """Busy time that no process of this tree spent is others': a spinner on every core leaves them the machine;
    where the kernel keeps no /proc/stat, nothing is said."""
    before = contention.sample()
    time.sleep(1.0)
    assert contention.others_share(before, contention.sample()) > 0.5
    assert contention.sample(tmp_path / "stat") is None and contention.others_share(None, before) == 0.0


def test_a_cpu_stat_that_holds_still_pins_others_share_at_none(
    busy_cores: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$BAKEOFF_CPU_STAT replaces the kernel's /proc/stat: a file that holds still says no other process ran, even
    beside a spinner on every core (how the tests pin an idle machine for the runs and calibrations they start)."""
    still = tmp_path / "stat"
    still.write_text("cpu  5 0 5 100 0 0 0 0 0 0\n")
    monkeypatch.setenv(CPU_STAT_ENV, str(still))
    before = contention.sample()
    time.sleep(0.5)
    assert before is not None and before.busy_seconds == 10 / os.sysconf("SC_CLK_TCK")
    assert contention.others_share(before, contention.sample()) == 0.0


def test_plan_on_the_default_config(cost_cache: Path, capsys: pytest.CaptureFixture) -> None:
    """On a machine fast enough for the whole search in the default's 15 minutes, plan keeps all of it and trains it
    longer, at most twice as long."""
    samples.cache_calibration(cost_cache, load_config(DEFAULT_CONFIG), step_seconds=0.01)
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    fitted = out.split("\nbudget: 15 min; fitted to it:\n  search.halving.max_epochs 20 -> ")[1]
    epochs = int(fitted.split(":")[0])
    assert 20 < epochs <= 40 and fitted.startswith(f"{epochs}: 20 epochs take an estimated ")
    assert out.startswith(f"9 variants from {DEFAULT_CONFIG}:\n")
    listed = [line.split() for line in out.splitlines()[1:10]]
    assert [line[0] for line in listed[:3]] == ["cnn", "dropout", "batch_norm"] and all(
        line[1:] == ["(as", "written)"] for line in listed[:3]
    )
    assert all(line[0].startswith("wide_top-") and line[1].startswith("model.dense_units=") for line in listed[3:])
    assert (
        f"     0       3         9     3\n     1       9         3     1\n     2      {epochs}         1     1\n" in out
    )


def test_plan_on_a_bad_config_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = write(tmp_path, "variants:\n  - {name: a, model: {type: cnn, dropout: {uniform: [0.5, 0.1]}}}\n")
    assert main(["plan", "--config", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"bakeoff: error: {path}: variant 'a': model.dropout: uniform needs low < high, got [0.5, 0.1]: for one "
        "value write it plainly\n"
    )


def test_plan_prices_an_ingested_artifact_by_its_examples_pixels_and_channels(
    tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture
) -> None:
    from bakeoff.components.storage.records import DatasetMetadata, Preprocessing, SkippedFiles

    path = write(
        tmp_path,
        "defaults: {training: {batch_size: 50, epochs: 3}, workers: 1}\n"
        "variants:\n  - {name: a, model: {type: mlp}}\n  - {name: b, model: {type: cnn}}\n",
    )
    config = load_config(path)
    rgb = costs.Images(1000, (64, 48, 3), 5, validation=100)  # an epoch's end scores the artifact's 100
    data = tmp_path / "artifact"
    data.mkdir()
    metadata = DatasetMetadata(
        {"train": 1000, "validation": 100, "test": 100}, 2, [64, 48, 3], list("abcde"), "f", "folder",
        Preprocessing(64, 48, 3, "bilinear"), {}, SkippedFiles(0, []), {},
    )  # fmt: skip
    (data / "metadata.json").write_text(metadata.to_json())
    measured = samples.cache_calibration(cost_cache, config, images=rgb)
    # The costs are kept per image shape: those of 64x48x3 images price no 28x28x1 network.
    assert measured.missing(costs.timed(config.variants, rgb), rgb) == []
    assert len(measured.missing(costs.timed(config.variants))) == 2
    gray, colour = (costs.macs(config.variants[1], images) for images in (costs.FASHION_MNIST, rgb))
    assert colour > 3 * gray  # more pixels, three channels
    assert main(["plan", "--config", str(path), "--data", str(data)]) == 0
    out = capsys.readouterr().out
    seconds = estimate(config, 1000, measured, images=rgb)[1]
    assert (
        f"priced on {data} (ingested from folder): 1,000 training examples of 64x48x3 pixels, 5 classes\n"
        f"estimated time: {seconds / 60:.1f} min; the jobs one at a time on 1,000 examples"
    ) in out
    assert main(["plan", "--config", str(path), "--data", str(tmp_path)]) == 1
    assert "holds no metadata.json" in capsys.readouterr().err


def test_without_the_default_source_ingest_is_timed_on_images_of_the_plan_s_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user of their own folder may not have Debian's Fashion-MNIST: the calibration then times ingest on random
    PNG files of the shape it prices, scaled to Fashion-MNIST's pixel values, rather than fail for the default."""
    missing = str(tmp_path / "no-fashion-mnist")
    monkeypatch.setattr(defaults, "SOURCE", missing)
    monkeypatch.setattr(calibration, "INGEST_SAMPLE", 40)
    seconds = calibration.timed_ingest(missing, tmp_path / "data", costs.Images(0, (20, 20, 3), 3))
    assert seconds > 0 and not (tmp_path / "data").exists()
    assert json.loads((tmp_path / "data-sample" / "metadata.json").read_text())["image_shape"] == [20, 20, 3]


BF16_CPU = frozenset({"avx512f", "avx512_bf16"})
TWO_FAMILIES = (
    "defaults: {training: {batch_size: 50, epochs: 3}, workers: 2}\n"
    "variants:\n"
    "  - {name: conv, model: {type: cnn}}\n"
    "  - {name: dense, model: {type: mlp}}\n"
    "  - {name: written, model: {type: cnn, filters: [8, 16]}, training: {precision: float32}}\n"
)


def test_auto_variants_are_timed_at_bfloat16_too_only_on_a_cpu_with_its_units(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TWO_FAMILIES))
    on_avx2 = costs.timed(config.variants, flags=frozenset({"avx2"}))
    assert {v.training.precision for v in on_avx2} == {AUTO, FLOAT32}
    with_bf16 = costs.timed(config.variants, flags=BF16_CPU)
    assert sorted((v.name, v.training.precision) for v in with_bf16 if v.training.precision == BFLOAT16) == [
        ("conv", BFLOAT16),
        ("dense", BFLOAT16),
    ]  # not `written`: a precision written is trained as written
    assert len(with_bf16) == len(on_avx2) + 2


def test_the_plan_trains_auto_at_bfloat16_only_where_the_calibration_measured_it_faster(
    tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan a run trains: the convolutional network's bfloat16 step measured faster than its float32 one, the
    dense one's slower; the written float32 variant stays; on a CPU without the units `auto` is left to the replicas."""
    path = write(tmp_path, TWO_FAMILIES + "search: {budget: {minutes: 60}}\n")
    config = load_config(path)
    fp32 = samples.calibration(config, step_seconds=0.05)
    bf16 = [
        dataclasses.replace(step, precision=BFLOAT16, step_seconds=step.step_seconds * factor)
        for step in fp32.steps
        for factor in [{"cnn": 0.7, "mlp": 1.4}[step.architecture]]
    ]
    (cost_cache / cache.FILE).write_text(dataclasses.replace(fp32, steps=[*fp32.steps, *bf16]).to_json())

    def planned(flags: str) -> tuple[dict[str, str], list[str]]:
        cpuinfo = tmp_path / f"cpuinfo-{len(flags)}"
        cpuinfo.write_text(f"flags\t\t: {flags}\n")
        monkeypatch.setenv(CPUINFO_ENV, str(cpuinfo))
        assert main(["plan", "--config", str(path), "--json", "--max-train-examples", "1000"]) == 0
        document = json.loads(capsys.readouterr().out)
        return {v["name"]: v["spec"]["training"]["precision"] for v in document["variants"]}, document["precisions"]

    precisions, lines = planned("fpu avx2 avx512f avx512_bf16")
    assert precisions == {"conv": BFLOAT16, "dense": FLOAT32, "written": FLOAT32}
    assert lines == [
        "training.precision auto -> float32: dense (bfloat16 measured no faster here)",
        "training.precision auto -> mixed_bfloat16: conv (measured faster here at their shape)",
    ]
    assert planned("fpu avx2 avx512f") == ({"conv": AUTO, "dense": AUTO, "written": FLOAT32}, [])
    # a variant the budget leaves out trains at nothing: no precision line names it
    steps = [*fp32.steps, *bf16]
    costly = [
        dataclasses.replace(step, step_seconds=step.step_seconds * 100) if step.architecture == "mlp" else step
        for step in steps
    ]
    (cost_cache / cache.FILE).write_text(dataclasses.replace(fp32, steps=costly).to_json())
    tight = load_config(write(tmp_path, TWO_FAMILIES + "search: {budget: {minutes: 3}}\n", "tight.yaml"))
    plan, _ = plan_config(tight, 1000, flags=BF16_CPU)
    assert [v.name for v in plan.config.variants] == ["conv", "written"]
    assert plan.precisions == ["training.precision auto -> mixed_bfloat16: conv (measured faster here at their shape)"]
