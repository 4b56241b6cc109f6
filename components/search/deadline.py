"""A budgeted run's deadline: each halve step keeps as many as the rest of the search can train by then.

The plan fits the costliest path through the rungs to the budget (``budget.fit``), so a run whose cheap variants lead
would end minutes early, and one slower than its plan late. At each halve the run knows who leads and how long it
has taken: the best goes on, then each next in rank order while the rest of the search, costed as the plan costs it
and scaled by how far the run so far is off its plan, still ends by the deadline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from bakeoff.components.defaults import DEADLINE_KEEP_FACTOR, DEADLINE_SCALE
from bakeoff.components.errors import BakeoffError
from bakeoff.components.storage.records import Record


@dataclasses.dataclass(frozen=True)
class Deadline(Record):
    """When a run should end and its plan's costs, for its halve steps: the pipeline's ``deadline`` (JSON)."""

    pipeline_started: float  # Unix seconds the pipeline started: the run's time so far counts from here
    ends: float  # Unix seconds the run should end by: its command's start and the budget
    epoch_seconds: dict[str, float]  # each variant's epoch, by name
    job_seconds: float  # a job's start and its task's
    step_seconds: float  # a step's process start (each halve, select)
    before_seconds: float  # the steps before the first job: check and ingest
    select_seconds: float  # the select step
    stops: list[int]  # each rung's stop epoch, as planned (the run's last rung is its plan's last)
    keeps: list[int]  # each rung's keep, as planned

    def so_far(self, entered: Sequence[Sequence[str]]) -> float:
        """The plan's seconds of the run up to rung ``len(entered) - 1``'s halve, which is running, whose variants
        entered each rung as ``entered`` says."""
        seconds, done = self.before_seconds + len(entered) * self.step_seconds, 0
        for stop, names in zip(self.stops, entered, strict=False):
            seconds += sum((stop - done) * self.epoch_seconds[name] + self.job_seconds for name in names)
            done = stop
        return seconds

    def rest(self, rung: int, kept: Sequence[str]) -> float:
        """The plan's seconds of the run after rung ``rung``'s halve keeps ``kept``: as ``budget.estimate`` costs it,
        the costliest of them surviving each later rung."""
        entering = [len(kept)]
        for keep in self.keeps[rung + 1 : -1]:  # each later halve but the last rung's, which has none
            entering.append(min(entering[-1], keep))
        costs = sorted((self.epoch_seconds[name] for name in kept), reverse=True)
        jobs = path_seconds(costs, self.stops[rung:], entering, self.job_seconds)
        return jobs + (len(entering) - 1) * self.step_seconds + self.select_seconds

    def scale(self, entered: Sequence[Sequence[str]], now: float) -> float:
        """How much longer (above 1) or shorter the run took so far than its plan, within ``DEADLINE_SCALE``."""
        low, high = DEADLINE_SCALE
        return min(high, max(low, (now - self.pipeline_started) / self.so_far(entered)))

    def survivors(self, entered: Sequence[Sequence[str]], ranked: Sequence[str], keep: int, now: float) -> list[str]:
        """Of rung ``len(entered) - 1``'s ``ranked`` (best first), those that go on: the best, then each next one, in
        rank order, with which the rest of the search is still estimated to end by the deadline (``now`` is Unix
        seconds), up to ``DEADLINE_KEEP_FACTOR`` times the rung's ``keep``: more than it where cheap variants lead,
        fewer where the run is behind its plan."""
        rung, scale = len(entered) - 1, self.scale(entered, now)
        kept = list(ranked[:1])
        for name in ranked[1:]:
            if len(kept) < DEADLINE_KEEP_FACTOR * keep and now + scale * self.rest(rung, [*kept, name]) <= self.ends:
                kept.append(name)
        return kept


def path_seconds(costs: Sequence[float], stops: Sequence[int], entering: Sequence[int], job_seconds: float) -> float:
    """The jobs' seconds of rungs that stop at ``stops[1:]``, after ``stops[0]``, with ``entering[k]`` variants
    entering the k-th: the first of ``costs`` (seconds an epoch, costliest first for an upper bound) train the rung's
    epochs, and each job pays its start."""
    return sum(
        sum(costs[:count]) * (stop - done) + count * job_seconds
        for done, stop, count in zip(stops[:-1], stops[1:], entering, strict=True)
    )


def check_deadline(text: str, variants: Sequence[str]) -> Deadline | None:
    """The deadline ``text`` holds (empty: none), if it costs each of ``variants``; else one line saying what is
    wrong."""
    if not text:
        return None
    deadline = Deadline.from_json(text, "its value")
    missing = [name for name in variants if name not in deadline.epoch_seconds]
    if missing:
        raise BakeoffError(
            f"costs no epoch of {', '.join(map(repr, missing))}: leave it empty, "
            "or let `bakeoff run` set it from its plan"
        )
    return deadline
