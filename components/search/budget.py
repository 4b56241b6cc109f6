"""The plan's cost: seconds per epoch from this machine's measured steps, and a search fitted to its budget."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from bakeoff.components import defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling.precision import AUTO, BFLOAT16, FLOAT32, cpu_flags, has_bf16_units
from bakeoff.components.search.calibration import calibrated
from bakeoff.components.search.costs import (
    FASHION_MNIST,
    Calibration,
    Images,
    at_precision,
    macs,
    measured_precision,
    shape_of,
)
from bakeoff.components.search.deadline import Deadline, path_seconds
from bakeoff.components.search.halving import Rung, schedule
from bakeoff.components.spec import Config, Halving, Variant
from bakeoff.components.storage.records import timestamp

TRAIN_EXAMPLES = FASHION_MNIST.examples  # the default source's training split


def epoch_seconds(
    variant: Variant, train_examples: int, calibration: Calibration, images: Images = FASHION_MNIST
) -> float:
    """One epoch of ``variant`` here: its steps, each the measured step of its shape at its network's MACs, and its
    end (validation, backup), also measured: as if it validates every epoch, an upper bound for ``validation_freq``
    above 1."""
    steps = train_examples // (variant.training.batch_size * variant.workers)  # as the worker divides an epoch
    shape, network = shape_of(variant, images), macs(variant, images)
    return steps * calibration.step_seconds(shape, network) + calibration.epoch_end_seconds(
        shape, network, images.validation
    )


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a search will train: the config as fitted to its budget, its rungs (None: every variant trains its epochs
    once), the estimate."""

    config: Config
    rungs: list[Rung] | None
    seconds: float  # at most: the costliest variants survive each rung
    least_seconds: float  # at least: the cheapest ones do (the same without halving)
    fitted: list[str]  # what the budget changed, a line each: draws or epochs cut, or epochs added
    calibration: Calibration  # the costs the estimate used
    train_examples: int  # an epoch's, as estimated
    images: Images = FASHION_MNIST  # the dataset it prices
    precisions: list[str] = dataclasses.field(default_factory=list)  # what `auto` chose where it had a choice
    spent: float = 0.0  # seconds of the budget gone before it (measuring this machine's costs): not in the estimate


def estimate(
    config: Config,
    train_examples: int,
    calibration: Calibration,
    costliest: bool = True,
    images: Images = FASHION_MNIST,
) -> tuple[list[Rung] | None, float]:
    """The rungs and the estimated seconds of the whole run, its jobs one at a time.

    With halving, which variants survive is not known in advance, so each rung is costed as if the costliest
    ones did: the estimate is an upper bound (with ``costliest`` False, as if the cheapest did: a lower bound).
    Every job also pays its start (``job_start``), and the pipeline's steps their ``around``.
    """
    halving = config.search.halving if config.search else None
    start = calibration.job_start(config.variants, images) + calibration.task_seconds
    epochs = {v.name: epoch_seconds(v, train_examples, calibration, images) for v in config.variants}
    costs = sorted(epochs.values(), reverse=costliest)
    if halving is None:
        seconds = sum(epochs[v.name] * v.training.epochs for v in config.variants)
        return None, seconds + len(config.variants) * start + overhead_seconds(calibration, 0, images)
    rungs = schedule(len(config.variants), halving)
    seconds = path_seconds(costs, [0, *(rung.epochs for rung in rungs)], [rung.entering for rung in rungs], start)
    return rungs, seconds + overhead_seconds(calibration, len(rungs) - 1, images)


def overhead_seconds(calibration: Calibration, halvings: int, images: Images = FASHION_MNIST) -> float:
    """The steps around the jobs: check, ingest and each halve, each a process start; ingest builds the data; and
    select (``select_seconds``)."""
    return (2 + halvings) * calibration.task_seconds + ingest_seconds(calibration, images) + select_seconds(calibration)


def ingest_seconds(calibration: Calibration, images: Images) -> float:
    """Ingest of ``images``: the measured Fashion-MNIST ingest, in proportion to the pixel values read and written."""
    return calibration.ingest_seconds * images.values / FASHION_MNIST.values


def select_seconds(calibration: Calibration) -> float:
    """The select step: its process start, which imports TensorFlow, then, as a job's start, the data and a model
    read, scored and saved."""
    return calibration.select_task_seconds + calibration.start_seconds


def deadline(plan: Plan, command_started_unix: float, pipeline_started_unix: float) -> Deadline:
    """The deadline a budgeted halving ``plan``'s run is held to, given the Unix seconds its command and its pipeline
    started: the budget counts from the command's start, with the plan's costs for its halve steps."""
    assert plan.rungs is not None and plan.config.budget_minutes is not None
    calibration = plan.calibration
    return Deadline(
        pipeline_started=pipeline_started_unix,
        ends=command_started_unix + plan.config.budget_minutes * 60,
        epoch_seconds={
            v.name: epoch_seconds(v, plan.train_examples, calibration, plan.images) for v in plan.config.variants
        },
        job_seconds=calibration.job_start(plan.config.variants, plan.images) + calibration.task_seconds,
        step_seconds=calibration.task_seconds,
        # overhead_seconds()'s parts: check and ingest before the jobs, select after them
        before_seconds=2 * calibration.task_seconds + ingest_seconds(calibration, plan.images),
        select_seconds=select_seconds(calibration),
        stops=[rung.epochs for rung in plan.rungs],
        keeps=[rung.keep for rung in plan.rungs],
    )


def _with_samples(config: Config, samples: int) -> Config:
    """The config with only the first ``samples`` draws of each sampled variant (the draws of ``search.samples`` =
    samples)."""
    keep = [v for v in config.variants if (draw := config.expansions[v.name].sample) is None or draw < samples]
    assert config.search is not None
    return dataclasses.replace(
        config,
        variants=keep,
        search=dataclasses.replace(config.search, samples=samples),
        expansions={v.name: config.expansions[v.name] for v in keep},
    )


def _with_epochs(config: Config, epochs: int) -> Config:
    """The config trained to ``epochs``: with halving, ``max_epochs`` set to it (every variant trains to it), lowered
    or raised; without, every variant's epochs at most ``epochs``."""
    assert config.search is not None
    search, halving = config.search, config.search.halving
    if halving is not None:
        search = dataclasses.replace(search, halving=Halving(min(halving.min_epochs, epochs), epochs, halving.eta))
    variants = [
        dataclasses.replace(
            v, training=dataclasses.replace(v.training, epochs=epochs if halving else min(v.training.epochs, epochs))
        )
        for v in config.variants
    ]
    return dataclasses.replace(config, variants=variants, search=search)


def _minutes(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:.3g} min" if minutes < 100 else f"{minutes:.0f} min"


def _largest_within(
    config: Config,
    shrink: Callable[[Config, int], Config],
    top: int,
    calibration: Calibration,
    train_examples: int,
    limit: float,
    images: Images,
) -> int:
    """The largest n of ``top`` down to 1 whose ``shrink(config, n)`` is estimated within ``limit`` seconds; 0 if
    none is."""
    return next(
        (
            n
            for n in range(top, 0, -1)
            if estimate(shrink(config, n), train_examples, calibration, images=images)[1] <= limit
        ),
        0,
    )


def fit(
    config: Config,
    calibration: Calibration,
    train_examples: int = TRAIN_EXAMPLES,
    images: Images = FASHION_MNIST,
    spent: float = 0.0,
) -> Plan:
    """The plan for ``config``, fitted to ``search.budget_minutes`` before anything runs rather than cut short mid-rung.

    Over the budget: fewer draws per sampled variant first (grid and baseline variants stay), then the costliest
    variants an epoch, then fewer epochs for every variant (with halving, a lower ``max_epochs``); if even one draw
    at one epoch is over the budget, one line says so. The last draw, or the costliest variant, goes only when
    keeping it would leave the search under ``DRAWN_EPOCHS_SHARE`` of the epochs it trains without it (grown, as
    below, where that leaves room). Under it, a halving search trains to the most epochs the budget holds, up to
    ``GROWN_EPOCHS_FACTOR`` times its ``max_epochs``. The budget counts ``spent`` seconds as gone already (a run's
    before its plan: measuring this machine's costs).
    """
    seconds = estimate(config, train_examples, calibration, images=images)[1]
    budget = config.budget_minutes
    if budget is None:
        return _plan(config, [], calibration, train_examples, images)
    assert config.search is not None
    limit, fitted, samples = budget * 60 - spent, [], config.search.samples
    over = f"over the budget of {budget:g} min"
    if spent:
        fitted.append(f"the budget's first {_minutes(spent)} went to measuring this machine's costs, kept for later")
        over = f"over the {_minutes(limit)} left of the budget of {budget:g} min"
    halving = config.search.halving  # kept by the shrinking below
    if seconds > limit and any(expansion.sample is not None for expansion in config.expansions.values()):
        kept, why = _largest_within(config, _with_samples, samples, calibration, train_examples, limit, images), ""
        if not kept:  # one draw then, unless it would leave the search under its share of the epochs none leaves
            kept, undrawn = 1, _with_samples(config, 0)
            if undrawn.variants:
                longest = max(variant.training.epochs for variant in config.variants)
                one = _largest_within(
                    _with_samples(config, 1), _with_epochs, longest, calibration, train_examples, limit, images
                )
                # without draws, room to spare grows the search (_grown): compare with what it would train
                grows = defaults.GROWN_EPOCHS_FACTOR if halving else 1
                none = _largest_within(
                    undrawn, _with_epochs, longest * grows, calibration, train_examples, limit, images
                )
                if one < defaults.DRAWN_EPOCHS_SHARE * none:
                    kept, why = 0, f"; one would leave the search {one} epochs, none leaves it {none}"
        if kept < samples:
            config = _with_samples(config, kept)
            fitted.append(
                f"search.samples {samples} -> {kept}: {samples} draws per sampled variant take"
                f" an estimated {_minutes(seconds)}, {over}{why}"
            )
            seconds = estimate(config, train_examples, calibration, images=images)[1]
    if seconds <= limit:  # as written, or without the draws that went: room left may buy epochs
        return _grown(config, fitted, calibration, train_examples, images, limit)
    config, left_out = _without_costliest(config, calibration, train_examples, limit, images)
    if left_out:
        fitted += left_out
        seconds = estimate(config, train_examples, calibration, images=images)[1]
        if seconds <= limit:
            return _grown(config, fitted, calibration, train_examples, images, limit)
    longest = max(variant.training.epochs for variant in config.variants)
    fitting_epochs = _largest_within(config, _with_epochs, longest - 1, calibration, train_examples, limit, images)
    if not fitting_epochs:
        least = estimate(_with_epochs(config, 1), train_examples, calibration, images=images)[1]
        raise BakeoffError(
            f"{config.source}: search.budget.minutes: "
            f"{budget:g} min cannot hold even {len(config.variants)} variant{'s' if len(config.variants) > 1 else ''} at 1 epoch"  # noqa: E501 (a clause kept whole, so that grep finds it)
            f" (an estimated {_minutes(least)} here"
            + (f", after {_minutes(spent)} spent before the plan" if spent else "")
            + "): raise the budget or list fewer variants"
        )
    field = "search.halving.max_epochs" if halving else "training.epochs"
    fitted.append(
        f"{field} {longest} -> {fitting_epochs}: {longest} epochs take an estimated {_minutes(seconds)}, {over}"
    )
    return _plan(_with_epochs(config, fitting_epochs), fitted, calibration, train_examples, images)


def _without_costliest(
    config: Config, calibration: Calibration, train_examples: int, limit: float, images: Images
) -> tuple[Config, list[str]]:
    """``config`` less the fewest of its costliest variants an epoch that lets the search train at least
    ``DRAWN_EPOCHS_SHARE`` of the epochs its cheapest variant alone would (up to those written), and a line saying
    which went: five networks cut to 1 epoch each scored 0.21 on 64x64 shapes, where a plain residual network
    trained 31 (issue 59)."""
    costs = {v.name: epoch_seconds(v, train_examples, calibration, images) for v in config.variants}
    costliest = sorted(config.variants, key=lambda variant: costs[variant.name], reverse=True)
    longest = max(variant.training.epochs for variant in config.variants)

    def trained(leaving: int) -> tuple[Config, int]:  # the search less the ``leaving`` costliest, and its epochs
        left = _without(config, {variant.name for variant in costliest[:leaving]})
        return left, _largest_within(left, _with_epochs, longest, calibration, train_examples, limit, images)

    alone = trained(len(costliest) - 1)[1]
    everyone = trained(0)[1]
    for leaving in range(len(costliest)):
        left, epochs = trained(leaving)
        if epochs >= defaults.DRAWN_EPOCHS_SHARE * alone:
            break
    if not leaving:
        return config, []
    names = ", ".join(f"{v.name} ({costs[v.name]:.3g} s)" for v in costliest[:leaving])
    return left, [
        f"variants left out, the costliest an epoch: {names}; with them the search trains {everyone} epochs,"
        f" without them {epochs}"
    ]


def _without(config: Config, names: set[str]) -> Config:
    """The config less its variants ``names``."""
    keep = [variant for variant in config.variants if variant.name not in names]
    return dataclasses.replace(config, variants=keep, expansions={v.name: config.expansions[v.name] for v in keep})


def _grown(
    config: Config, fitted: list[str], calibration: Calibration, train_examples: int, images: Images, limit: float
) -> Plan:
    """The plan of a halving ``config`` within ``limit`` seconds of its budget raised to the most ``max_epochs`` they
    hold, up to ``GROWN_EPOCHS_FACTOR`` times those written (a search without halving trains its variants' epochs as
    written)."""
    assert config.search is not None and config.budget_minutes is not None
    halving, budget = config.search.halving, config.budget_minutes
    written = halving.max_epochs if halving else 0
    most = _largest_within(
        config, _with_epochs, written * defaults.GROWN_EPOCHS_FACTOR, calibration, train_examples, limit, images
    )
    if most <= written:
        return _plan(config, fitted, calibration, train_examples, images)
    grown = _with_epochs(config, most)
    seconds, more = (estimate(searched, train_examples, calibration, images=images)[1] for searched in (config, grown))
    line = (
        f"search.halving.max_epochs {written} -> {most}: {written} epochs take an estimated {_minutes(seconds)}, the"
        f" budget of {budget:g} min holds {most} ({_minutes(more)})"
    )
    return _plan(grown, [*fitted, line], calibration, train_examples, images)


def _plan(config: Config, fitted: list[str], calibration: Calibration, train_examples: int, images: Images) -> Plan:
    """The plan of the config as fitted: its rungs, its upper-bound estimate and the lower bound beside it."""
    rungs, seconds = estimate(config, train_examples, calibration, images=images)
    least = estimate(config, train_examples, calibration, False, images)[1]
    return Plan(config, rungs, seconds, least, fitted, calibration, train_examples, images)


def plan_config(
    config: Config,
    max_train_examples: int = 0,
    images: Images = FASHION_MNIST,
    flags: frozenset[str] | None = None,
    started: float | None = None,
) -> tuple[Plan, int]:
    """``config``'s plan on ``images`` for at most ``max_train_examples`` (0: the whole training split) with this
    machine's costs for that image shape (measured first if not cached), and that number of examples. Its ``auto``
    variants at what ``measured_precisions`` picks for a CPU of ``flags`` (None: this one's; none: left to each
    replica, as for a cluster's nodes).

    For a run whose budget counts from ``started`` (``time.monotonic()``; None: a plan alone), measuring takes at
    most ``CALIBRATION_SHARE`` of the budget, the variants it leaves unpriced sit the run out, and the plan fits
    what is left of the budget."""
    examples = min(max_train_examples or images.examples, images.examples)
    flags = cpu_flags() if flags is None else flags
    budget = config.budget_minutes
    until = started + defaults.CALIBRATION_SHARE * budget * 60 if started is not None and budget else None
    asked = timestamp()
    calibration = calibrated(config.variants, images=images, flags=flags, until=until)
    config, unpriced = _priced(config, calibration, images)
    config, picked = measured_precisions(config, calibration, images, flags)
    # measured now: the run's budget paid for it (the seconds a run takes to read its source, the deadline counts)
    measured = started is not None and calibration.measured_at >= asked
    spent = time.monotonic() - started if measured and started is not None else 0.0
    plan = fit(config, calibration, examples, images, spent)
    kept = {variant.name for variant in plan.config.variants}  # a variant the fit left out trains at nothing
    why = {BFLOAT16: "measured faster here at their shape", FLOAT32: "bfloat16 measured no faster here"}
    trained = {precision: [name for name in names if name in kept] for precision, names in sorted(picked.items())}
    chosen = [f"training.precision auto -> {p}: {', '.join(names)} ({why[p]})" for p, names in trained.items() if names]
    return dataclasses.replace(plan, fitted=[*unpriced, *plan.fitted], precisions=chosen, spent=spent), examples


def _priced(config: Config, calibration: Calibration, images: Images) -> tuple[Config, list[str]]:
    """``config`` less the variants ``calibration`` has no measured network of their shape for, and a line on them."""
    unpriced = {v.name for v in config.variants if not calibration.costs(shape_of(v, images))}
    if not unpriced:
        return config, []
    names = ", ".join(v.name for v in config.variants if v.name in unpriced)
    return _without(config, unpriced), [
        f"variants left out, not timed within the {defaults.CALIBRATION_SHARE:.0%} of the budget that measuring"
        f" this machine's costs may take: {names} (`bakeoff plan` times them all, for the next run)"
    ]


def measured_precisions(
    config: Config, calibration: Calibration, images: Images, flags: frozenset[str]
) -> tuple[Config, dict[str, list[str]]]:
    """``config`` with each ``auto`` variant at the precision ``measured_precision`` picks, where this CPU has
    bfloat16 units (elsewhere ``auto`` stays: a replica resolves it, float32 on a CPU), and the variants each
    precision was picked for."""
    if not has_bf16_units(flags):
        return config, {}
    picked: dict[str, list[str]] = {}
    variants = []
    for variant in config.variants:
        if variant.training.precision == AUTO:
            precision = measured_precision(variant, calibration, images, flags)
            picked.setdefault(precision, []).append(variant.name)
            variant = at_precision(variant, precision)
        variants.append(variant)
    return dataclasses.replace(config, variants=variants), picked
