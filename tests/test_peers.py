"""benchmarks/peers.py's pure parts: the peers search the default config's space, and bakeoff gets the same budget."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from bakeoff.components.defaults import CONFIG
from bakeoff.components.spaces import Space
from bakeoff.components.spec import load_config
from benchmarks.peers import Outcome, Size, bakeoff_config, draw

pytestmark = pytest.mark.unit


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


def test_every_variant_bakeoff_expands_is_a_point_of_the_peers_space():
    config = load_config(CONFIG)
    for variant in config.variants:
        expansion = config.expansions[variant.name]
        drawn = config.bases[expansion.base].variant(expansion.values)
        assert (drawn.model, drawn.workers) == (variant.model, variant.workers)
        assert dataclasses.replace(drawn.training, epochs=variant.training.epochs) == variant.training


def test_bakeoff_gets_the_default_config_under_the_peers_budget(tmp_path):
    budgeted, default = load_config(bakeoff_config(Size(budget_seconds=90), tmp_path)), load_config(CONFIG)
    assert default.search is not None
    assert budgeted.search == dataclasses.replace(default.search, budget_minutes=1.5)
    assert budgeted.variants == default.variants


def test_an_outcome_crosses_the_peer_process_whole():
    outcome = Outcome("optuna", "wide model.dropout=0.3", 0.91, 60.5, 7, "one view per image")
    assert Outcome.from_json(outcome.to_json()) == outcome
