"""The promotion gate against noise: a paired test on the shared validation split, from per-example outcomes.

Synthetic correctness vectors stand in for two models on Fashion-MNIST's 5,000 validation images; the gate's real
select path is tested in test_selection.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.components.selection.paired import Outcomes, bootstrap, compare, mcnemar
from bakeoff.components.selection.promotion import Gate, promote, verdict
from bakeoff.components.storage.records import Promotion, Score

pytestmark = pytest.mark.unit

EXAMPLES = 5000  # the default validation split


def paired(seed: int, champion_accuracy: float, wins: int, losses: int) -> tuple[np.ndarray, np.ndarray]:
    """(challenger, champion) correctness: the champion right on ``champion_accuracy`` of the images; the challenger
    the same except right on ``wins`` images the champion gets wrong and wrong on ``losses`` it gets right."""
    rng = np.random.default_rng(seed)
    champion = rng.random(EXAMPLES) < champion_accuracy
    challenger = champion.copy()
    challenger[rng.choice(np.flatnonzero(~champion), wins, replace=False)] = True
    challenger[rng.choice(np.flatnonzero(champion), losses, replace=False)] = False
    return challenger, champion


def accuracy_gate(challenger: np.ndarray, champion: np.ndarray, gate: Gate = Gate()) -> bool:
    return promote(gate, mcnemar(challenger, champion, gate.confidence))


def test_a_challenger_0_001_better_on_5000_images_is_kept_out() -> None:
    """+5 images of 5,000 with 200 disagreements: the rerun spread of one config, not a better model."""
    challenger, champion = paired(0, 0.9, wins=102, losses=97)
    comparison = mcnemar(challenger, champion, 0.95)
    assert comparison.gain == pytest.approx(0.001)
    assert comparison.low < 0 < comparison.high
    assert not promote(Gate(), comparison)
    assert verdict(Gate(), comparison).endswith("is within noise")
    assert promote(Gate(confidence=0), mcnemar(challenger, champion, 0)), "the old point gate let it in"


def test_a_clearly_better_challenger_gets_in() -> None:
    """+0.02: 200 more images right than wrong, p ≈ 1e-8."""
    challenger, champion = paired(1, 0.9, wins=250, losses=150)
    comparison = mcnemar(challenger, champion, 0.95)
    assert comparison.gain == pytest.approx(0.02) and comparison.low > 0
    assert promote(Gate(), comparison)
    assert verdict(Gate(), comparison).endswith("is beyond noise")


@pytest.mark.parametrize("confidence", [0.0, 0.5, 0.95, 0.99])
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("wins, losses", [(97, 102), (150, 250), (0, 40), (100, 100)])
def test_a_worse_challenger_or_a_tie_never_gets_in(seed: int, confidence: float, wins: int, losses: int) -> None:
    challenger, champion = paired(seed, 0.9, wins=wins, losses=losses)
    assert not accuracy_gate(challenger, champion, Gate(confidence=confidence))


def test_the_margin_stays_a_floor_and_force_publish_the_override() -> None:
    challenger, champion = paired(2, 0.9, wins=250, losses=150)
    assert not accuracy_gate(challenger, champion, Gate(min_improvement=0.03)), "+0.02 is below the margin"
    worse, champion = paired(3, 0.9, wins=0, losses=100)
    assert accuracy_gate(worse, champion, Gate(force=True))
    assert promote(Gate(), None), "no champion: the first version is published"


@pytest.mark.parametrize("wins, losses", [(3, 1), (0, 5), (20, 7), (7, 20), (60, 40), (61, 39), (140, 100)])
def test_the_interval_excludes_0_exactly_when_mcnemars_exact_p_value_is_below_the_level(wins: int, losses: int) -> None:
    """The decision by interval is McNemar's exact test; its p-value is the doubled binomial tail, summed here."""
    from math import comb

    challenger, champion = paired(4, 0.9, wins=wins, losses=losses)
    n, k = wins + losses, min(wins, losses)
    expected = min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n)
    comparison = mcnemar(challenger, champion, 0.95)
    assert comparison.p_value == pytest.approx(expected, rel=1e-9)
    assert (comparison.low > 0 or comparison.high < 0) == (expected < 0.05)


def test_the_accuracy_interval_is_clopper_pearsons_of_the_discordant_pairs() -> None:
    """3 wins of 4 disagreements among 5 images: Clopper-Pearson's 95 % interval of 3/4 is 0.1941 … 0.9937 (published
    tables), so the gain's is 4 × (2 × bound − 1) / 5."""
    comparison = mcnemar(np.array([1, 1, 1, 0, 1], bool), np.array([0, 0, 0, 1, 1], bool), 0.95)
    assert comparison.gain == pytest.approx(0.4)
    assert comparison.low == pytest.approx(4 * (2 * 0.194120 - 1) / 5, abs=1e-5)
    assert comparison.high == pytest.approx(4 * (2 * 0.993690 - 1) / 5, abs=1e-5)


def losses(seed: int, gain: float) -> tuple[Outcomes, Outcomes]:
    """(challenger, champion) per-example cross-entropies: the champion's spread like a real model's (mean ≈ 0.25),
    the challenger's lower by ``gain`` on average, with per-image noise of the same size (unclipped: only the
    differences count, and clipping at 0 would shift their mean)."""
    rng = np.random.default_rng(seed)
    champion = rng.exponential(0.25, EXAMPLES)
    challenger = champion + rng.normal(-gain, 0.25, EXAMPLES)
    right = np.ones(EXAMPLES, bool)
    return Outcomes(right, challenger), Outcomes(right, champion)


def test_val_loss_uses_a_paired_bootstrap_of_the_per_example_loss_difference() -> None:
    challenger, champion = losses(0, 0.001)
    noisy = compare("val_loss", challenger, champion, 0.95)
    assert noisy.test == "paired bootstrap" and noisy.low < 0 < noisy.high
    assert noisy.gain == pytest.approx(float(np.mean(champion.loss - challenger.loss)))
    assert not promote(Gate(), noisy)
    challenger, champion = losses(1, 0.05)
    assert promote(Gate(), compare("val_loss", challenger, champion, 0.95))
    for seed in range(3):
        challenger, champion = losses(seed, -0.02)  # a higher loss
        assert not promote(Gate(), compare("val_loss", challenger, champion, 0.95))
    assert compare("val_loss", *losses(0, 0.001), 0.95) == noisy, "seeded: the same outcomes, the same interval"


def test_bootstrap_confidence_0_is_the_mean_alone() -> None:
    comparison = bootstrap(np.array([0.1, -0.2, 0.4]), 0)
    assert comparison.low == comparison.high == comparison.gain == pytest.approx(0.1)


def test_the_selection_records_comparison_reads_back_and_an_older_record_without_it_still_reads() -> None:
    comparison = mcnemar(*paired(5, 0.9, wins=102, losses=97), 0.95)
    promotion = Promotion(False, False, 0.0, None, Score("cnn", "val_accuracy", 0.9), "kept", comparison)
    assert Promotion.from_json(promotion.to_json(), "p") == promotion
    first = Promotion(True, False, 0.0, None, Score("cnn", "val_accuracy", 0.9), "published", None)
    assert "comparison" not in first.to_dict() and Promotion.from_dict(first.to_dict(), "p") == first
