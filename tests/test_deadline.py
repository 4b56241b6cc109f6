"""A budgeted run's halve steps keep more than their rung's keep while the rest of the search still ends by the
deadline: the plan fits the costliest path, so a run whose cheap variants lead would end minutes early."""

from __future__ import annotations

import dataclasses

import pytest

from bakeoff.components.defaults import CONFIG as DEFAULT_CONFIG
from bakeoff.components.search.budget import deadline, fit
from bakeoff.components.search.deadline import Deadline
from bakeoff.components.spec import load_config
from tests import samples

pytestmark = pytest.mark.unit

# Rungs stop at epochs 1, 3 and 9 and keep 2, 1, 1; `c` costs three times an epoch of the others.
SMALL = Deadline(
    pipeline_started=0.0,
    ends=0.0,
    epoch_seconds={"a": 10.0, "b": 10.0, "c": 30.0, "d": 10.0},
    job_seconds=5.0,
    step_seconds=1.0,
    before_seconds=3.0,
    select_seconds=6.0,
    stops=[1, 3, 9],
    keeps=[2, 1, 1],
)
EVERYONE = ["a", "b", "c", "d"]


def test_the_deadline_costs_the_run_as_the_plan_does() -> None:
    """Up to a halve and after it, a path through the rungs costs what the plan's estimate does: the costliest
    survivors give its upper bound, the cheapest its lower one."""
    config = load_config(DEFAULT_CONFIG).with_budget(600.0)  # room for every variant
    plan = fit(config, samples.calibration(config))
    assert plan.rungs is not None and len(plan.rungs) == 3 and len(plan.config.variants) == 9
    held = deadline(plan, command_started_unix=0.0, pipeline_started_unix=0.0)
    assert held.ends == 600 * 60
    names = sorted(held.epoch_seconds, key=held.epoch_seconds.__getitem__)
    assert held.epoch_seconds[names[0]] < held.epoch_seconds[names[-1]]
    for path, seconds in ((names[::-1], plan.seconds), (names, plan.least_seconds)):
        entering = [path[: rung.entering] for rung in plan.rungs]
        for rung in (0, 1):
            so_far = held.so_far(entering[: rung + 1])
            assert so_far + held.rest(rung, entering[rung + 1]) == pytest.approx(seconds)


def test_a_halve_keeps_the_next_best_while_the_rest_still_ends_by_the_deadline() -> None:
    at_rung_1 = [EVERYONE, ["a", "c"]]
    now = SMALL.so_far(at_rung_1)  # the run is on its plan
    assert now == 3 + 2 + (60 + 4 * 5) + (2 * (10 + 30) + 2 * 5)  # check, ingest, two halves, two rungs' jobs
    both = now + 6 + 6 * (10 + 30) + 2 * 5  # `a` and `c` from epoch 3 to 9, then select
    on_time = dataclasses.replace(SMALL, ends=both)
    assert on_time.survivors(at_rung_1, ["a", "c"], 1, now) == ["a", "c"]
    assert dataclasses.replace(SMALL, ends=both - 1).survivors(at_rung_1, ["a", "c"], 1, now) == ["a"]
    # Past the deadline only the best goes on, whatever the rung's keep.
    assert dataclasses.replace(SMALL, ends=now - 60).survivors(at_rung_1, ["a", "c"], 2, now) == ["a"]


def test_one_that_does_not_fit_is_passed_over_for_the_next_that_does() -> None:
    """After rung 0 `c` ranks second but would take the rest of the search to 282 s, `b` to 122 s and `b` with `d`
    to 147: with 150 s left, `b` and `d` go on."""
    at_rung_0 = [EVERYONE]
    now = SMALL.so_far(at_rung_0)
    assert [SMALL.rest(0, kept) for kept in (["a", "c"], ["a", "b"], ["a", "b", "d"])] == [282, 122, 147]
    held = dataclasses.replace(SMALL, ends=now + 150)
    assert held.survivors(at_rung_0, ["a", "c", "b", "d"], 2, now) == ["a", "b", "d"]
    # At most twice the rung's keep (DEADLINE_KEEP_FACTOR), however far off the deadline.
    assert held.survivors(at_rung_0, ["a", "c", "b", "d"], 1, now) == ["a", "b"]


def test_a_run_behind_its_plan_keeps_fewer() -> None:
    """The rest is scaled by how far the run so far is off its plan: with 150 s left, `b`'s 122 s fit a run on its
    plan, but take 244 in a run at twice its plan's time."""
    at_rung_0 = [EVERYONE]
    on_plan = SMALL.so_far(at_rung_0)
    for now, kept in ((on_plan, ["a", "b"]), (2 * on_plan, ["a"])):
        assert dataclasses.replace(SMALL, ends=now + 150).survivors(at_rung_0, ["a", "b"], 1, now) == kept
    assert SMALL.scale(at_rung_0, 10 * on_plan) == 2.0  # a stalled start counts at most twice
