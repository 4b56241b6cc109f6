"""Two models on the same examples, paired: the gain of one over the other and its interval, from per-example
outcomes. Accuracy: McNemar's exact test, as the Clopper-Pearson interval of the discordant pairs. Loss: a paired
bootstrap of the per-example loss difference."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from bakeoff.components import defaults
from bakeoff.components.storage.records import Comparison

MCNEMAR = "mcnemar exact"
BOOTSTRAP = "paired bootstrap"
_BISECTIONS = 60  # halvings of [0, 1]: far below any difference a split of 10^5 examples shows
_CHUNK = 100  # bootstrap resamples drawn at once: 100 × 5,000 indices stay a few MB


@dataclasses.dataclass(frozen=True)
class Outcomes:
    """One model on a split, per example: right or not, and its cross-entropy."""

    correct: np.ndarray  # bool [n]
    loss: np.ndarray  # float64 [n]


def compare(metric: str, challenger: Outcomes, champion: Outcomes, confidence: float) -> Comparison:
    """The challenger's gain over the champion in ``metric``'s better direction, with its interval at ``confidence``
    (0: the gain alone)."""
    if challenger.correct.shape != champion.correct.shape:
        raise ValueError(f"unpaired outcomes: {challenger.correct.shape} against {champion.correct.shape} examples")
    if metric == "val_accuracy":
        return mcnemar(challenger.correct, champion.correct, confidence)
    return bootstrap(champion.loss - challenger.loss, confidence)  # a lower loss is the gain


def mcnemar(challenger: np.ndarray, champion: np.ndarray, confidence: float) -> Comparison:
    """The accuracy gain and McNemar's exact test: only the examples one model gets right and the other wrong count.

    Of ``n`` such examples the challenger wins ``b``; with no real difference ``b`` is Binomial(n, 1/2). The
    Clopper-Pearson interval of b/n, mapped to the accuracy gain, excludes 0 exactly when the two-sided exact p-value
    is below 1 − confidence, so the interval and the test always agree.
    """
    examples = len(challenger)
    b = int(np.sum(challenger & ~champion))
    n = b + int(np.sum(champion & ~challenger))
    gain = (2 * b - n) / examples
    wins = _Binomial(n)
    p_value = min(1.0, 2 * min(wins.at_most(b, 0.5), 1 - wins.at_most(b - 1, 0.5))) if n else 1.0
    if n == 0 or confidence == 0:
        low = high = gain
    else:
        tail = (1 - confidence) / 2
        # the smallest share whose chance of b or more wins is the tail; the largest whose chance of b or fewer is
        low_share = 0.0 if b == 0 else _solve(lambda p: 1 - wins.at_most(b - 1, p) - tail)
        high_share = 1.0 if b == n else _solve(lambda p: tail - wins.at_most(b, p))
        low, high = (n * (2 * low_share - 1) / examples, n * (2 * high_share - 1) / examples)
    return Comparison(MCNEMAR, confidence, examples, gain, low, high, p_value)


def bootstrap(gains: np.ndarray, confidence: float, samples: int = defaults.BOOTSTRAP_SAMPLES) -> Comparison:
    """The mean of per-example ``gains`` and its percentile interval over ``samples`` resamples of the examples,
    seeded: the same outcomes give the same interval."""
    examples = len(gains)
    gain = float(gains.mean())
    if confidence == 0:
        return Comparison(BOOTSTRAP, confidence, examples, gain, gain, gain, None)
    rng = np.random.default_rng(defaults.SEED)
    means = np.concatenate(
        [
            gains[rng.integers(0, examples, (min(_CHUNK, samples - start), examples))].mean(axis=1)
            for start in range(0, samples, _CHUNK)
        ]
    )
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Comparison(BOOTSTRAP, confidence, examples, gain, float(low), float(high), None)


class _Binomial:
    """X ~ Binomial(n, p): its lower tail summed exactly in log space (no scipy), the coefficients computed once."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.log_choose = np.array(
            [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n + 1)]
        )

    def at_most(self, k: int, p: float) -> float:
        """P(X ≤ k)."""
        if k < 0:
            return 0.0
        if k >= self.n:
            return 1.0
        if p <= 0 or p >= 1:
            return 1.0 if p <= 0 else 0.0
        i = np.arange(k + 1)
        terms = self.log_choose[: k + 1] + i * math.log(p) + (self.n - i) * math.log1p(-p)
        return float(min(1.0, np.exp(terms).sum()))


def _solve(increasing: Callable[[float], float]) -> float:
    """The p in [0, 1] where ``increasing(p)`` crosses 0, by bisection."""
    low, high = 0.0, 1.0
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if increasing(middle) < 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2
