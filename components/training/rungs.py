"""Rung training: a job trains a variant up to a stop epoch of its schedule, and the next job resumes there."""

from __future__ import annotations

from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import Variant


def stop_epoch(variant: Variant, requested: int) -> int:
    """The epoch a job of ``variant`` stops after: ``requested``, where 0 means the schedule's end
    (``training.epochs``)."""
    schedule = variant.training.epochs
    if not 0 <= requested <= schedule:
        raise BakeoffError(
            f"variant {variant.name!r}: stop epoch {requested} is outside its schedule of {schedule} epochs:"
            " pass 1 to training.epochs (0: the whole schedule)"
        )
    return requested or schedule
