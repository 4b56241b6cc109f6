"""The winner: every candidate scored alike on validation, the best tested on test, published if it beats the
champion."""

import base64
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bakeoff.components import defaults, progress
from bakeoff.components.data import artifact
from bakeoff.components.data.fashion_mnist import Split
from bakeoff.components.errors import BakeoffError
from bakeoff.components.modeling.evaluation import confident_mistakes, confusion_matrix, outcomes, predict, score
from bakeoff.components.selection.paired import Outcomes, compare
from bakeoff.components.selection.promotion import promote, verdict
from bakeoff.components.selection.ranking import direction, rank
from bakeoff.components.selection.settings import SelectionSettings
from bakeoff.components.storage import Store, open_store, registry, runs
from bakeoff.components.storage.records import (
    Candidate,
    Champion,
    Comparison,
    DatasetInfo,
    DatasetMetadata,
    Decision,
    Manifest,
    Mistake,
    Promotion,
    PublishedMetrics,
    Score,
    ScoredCandidate,
    SelectionBasis,
    SelectionRecord,
    Stopped,
    Summary,
    Winner,
    timestamp,
)


def select_winner(
    candidates: list[Candidate],
    data_dir: str,
    store_uri: str,
    run_id: str,
    settings: SelectionSettings,
    stopped: Sequence[Stopped] = (),
) -> Summary:
    """Scores, ranks, tests, and publishes unless the champion stays; returns the run's summary (the CLI's --json).

    ``stopped`` are the variants successive halving stopped before the last
    rung, each with its rung and reason: the summary lists them after the candidates.

    The summary, with what people look at in the report (the winner's confusion
    matrix and most confident mistakes on test), is also kept as the run's
    selection record, ``runs/<run>/selection.json``.
    """
    if not candidates:
        raise BakeoffError("no candidates to select from: the config must list at least one variant")
    model_name, metric = settings.model_name, settings.metric
    store = open_store(store_uri)
    data = open_store(data_dir)
    metadata = artifact.read_metadata(data)
    validation = artifact.read_shards(data, "validation")
    with tempfile.TemporaryDirectory(prefix="bakeoff-select-") as scratch:
        scored, per_example = _scored(store, run_id, candidates, validation, Path(scratch))
        ranking = rank(scored, metric)
        best = ranking[0]
        winner = next(c for c in candidates if c.variant == best.variant)
        winner_dir = Path(scratch) / winner.variant
        test = artifact.read_shards(data, "test")
        test_probabilities = predict(winner_dir, test.images)  # once: the test scores and the record come from it
        test_result = score(test_probabilities, test.labels)
        champion, champion_outcomes = _champion(store, model_name, validation, Path(scratch) / "champion")
        comparison = (
            compare(metric, per_example[best.variant], champion_outcomes, settings.gate.confidence)
            if champion_outcomes
            else None
        )
        decision = _decide(settings, best, champion, comparison)
        manifest = _manifest(run_id, settings, winner, ranking, test_result, metadata, decision)
        version = registry.publish(store, model_name, winner_dir, manifest) if decision.published else None
    summary = Summary(
        run_id=run_id,
        winner=Winner(
            variant=best.variant,
            version=version,
            uri=store.uri_for(f"{registry.model_prefix(model_name)}/{version}") if version else None,
            val_accuracy=best.val_accuracy,
            test_accuracy=test_result["accuracy"],
        ),
        promotion=Promotion(
            **vars(decision),
            message=_decision(settings, best, champion, comparison, version),
            comparison=comparison,
        ),
        candidates=ranking,
        stopped=list(stopped),
    )
    runs.write_selection(store, _record(summary, metric, metadata, test, test_probabilities))
    return summary


def _scored(
    store: Store, run_id: str, candidates: list[Candidate], validation: Split, scratch: Path
) -> tuple[list[ScoredCandidate], dict[str, Outcomes]]:
    """Every candidate's model fetched into ``scratch`` and scored on ``validation``, beside its training numbers;
    and each one's per-example outcomes, by variant, for the paired test against the champion."""
    scored, per_example = [], {}
    for candidate in candidates:
        progress.emit(candidate.variant, progress.Event("evaluating"))
        model_dir = store.get_dir(f"{candidate.prefix}/{runs.MODEL}", scratch / candidate.variant)
        probabilities = predict(model_dir, validation.images)
        result = score(probabilities, validation.labels)
        per_example[candidate.variant] = Outcomes(*outcomes(probabilities, validation.labels))
        training = candidate.metrics
        scored.append(
            ScoredCandidate(
                variant=candidate.variant,
                workers=training.workers,
                num_replicas_in_sync=training.num_replicas_in_sync,
                val_accuracy=result["accuracy"],
                val_loss=result["loss"],
                epochs=training.epochs,
                train_seconds=sum(runs.rung_seconds(store, run_id, training)),  # every rung's job, if halving kept it
                examples_per_second=training.examples_per_second,
                uri=candidate.uri,
                precision=training.precision,
            )
        )
    return scored, per_example


def _decide(
    settings: SelectionSettings, best: ScoredCandidate, champion: Champion | None, comparison: Comparison | None
) -> Decision:
    """Whether ``best`` is published: the promotion gate on its paired comparison with the champion, if there is
    one."""
    metric, gate = settings.metric, settings.gate
    return Decision(
        published=promote(gate, comparison),
        forced=gate.force,
        min_improvement=gate.min_improvement,
        champion=champion,
        challenger=Score(best.variant, metric, best.score(metric)),
    )


def _manifest(
    run_id: str,
    settings: SelectionSettings,
    winner: Candidate,
    ranking: list[ScoredCandidate],
    test_result: dict[str, float],
    metadata: DatasetMetadata,
    decision: Decision,
) -> Manifest:
    """What a published version says of itself: the winner's spec, its numbers, how it was chosen and on what data."""
    best, metric = ranking[0], settings.metric
    return Manifest(
        model=settings.model_name,
        run_id=run_id,
        variant=winner.variant,
        spec=winner.spec,
        metrics=PublishedMetrics(
            best.val_accuracy, best.val_loss, test_result["accuracy"], test_result["loss"], winner.metrics
        ),
        selection=SelectionBasis(metric, direction(metric), [c.variant for c in ranking]),
        dataset=DatasetInfo(metadata.fingerprint, metadata.counts, metadata.preprocessing),
        promotion=decision,
        source_uri=winner.uri,
        created=timestamp(),
    )


def _record(
    summary: Summary, metric: str, metadata: DatasetMetadata, test: Split, probabilities: np.ndarray
) -> SelectionRecord:
    """The run's selection record: the summary and what the report shows of the winner on test."""
    return SelectionRecord(
        **vars(summary),
        metric=metric,
        class_names=metadata.class_names,
        confusion_matrix=confusion_matrix(test.labels, probabilities.argmax(axis=1), len(metadata.class_names)),
        misclassified=_misclassified(test, probabilities),
        created=timestamp(),
    )


def _misclassified(test: Split, probabilities: np.ndarray) -> list[Mistake]:
    """The winner's most confident mistakes on test, each with its image as a base64 PNG."""
    import tensorflow as tf

    mistakes = []
    for index in confident_mistakes(probabilities, test.labels, defaults.MISCLASSIFIED):
        predicted = int(probabilities[index].argmax())
        image = test.images[index].astype(np.uint8)
        png = tf.io.encode_png(image if image.ndim == 3 else image[..., np.newaxis]).numpy()
        mistakes.append(
            Mistake(
                index=index,
                true=int(test.labels[index]),
                predicted=predicted,
                confidence=float(probabilities[index, predicted]),
                png=base64.b64encode(png).decode("ascii"),
            )
        )
    return mistakes


def _champion(
    store: Store, model_name: str, validation: Split, scratch: Path
) -> tuple[Champion | None, Outcomes | None]:
    """The latest published version scored now, on this run's validation split with the candidates' code, and its
    per-example outcomes there.

    Never the numbers in its manifest: they may come from another dataset (its
    fingerprint is kept beside the fresh scores to show it).
    """
    versions = registry.list_versions(store, model_name)
    if not versions:
        return None, None
    latest = versions[-1]
    model_dir = store.get_dir(f"{registry.model_prefix(model_name)}/{latest.version}", scratch)
    probabilities = predict(model_dir, validation.images)
    result = score(probabilities, validation.labels)
    return (
        Champion(latest.version, latest.variant, result["accuracy"], result["loss"], latest.dataset.fingerprint),
        Outcomes(*outcomes(probabilities, validation.labels)),
    )


def _decision(
    settings: SelectionSettings,
    best: ScoredCandidate,
    champion: Champion | None,
    comparison: Comparison | None,
    version: int | None,
) -> str:
    """One line for people: what was published, or which version was kept over what, and the paired test's why."""
    metric = settings.metric
    if champion is None or comparison is None:
        return f"published version {version}: {best.variant} ({metric} {best.score(metric):.4f}), the first"
    why = verdict(settings.gate, comparison)
    if version is None:
        return (
            f"kept version {champion.version} ({metric} {champion.score(metric):.4f}) over {best.variant}"
            f" ({best.score(metric):.4f}): {why}"
        )
    return (
        f"published version {version}: {best.variant} ({metric} {best.score(metric):.4f}) over version"
        f" {champion.version} ({champion.score(metric):.4f}): {why}"
    )


def select_run(variants: list[str], data_dir: str, store_uri: str, run_id: str, settings: SelectionSettings) -> Summary:
    """``select_winner`` over the variants that run ``run_id`` trained, read back from the store."""
    store = open_store(store_uri)
    candidates = [runs.candidate(store, run_id, variant) for variant in variants]
    stopped = [
        Stopped(entry.variant, record.rung, record.epochs, settings.metric, entry.score(settings.metric), entry.reason)
        for record in runs.search_records(store, run_id)
        for entry in record.stopped
    ]
    return select_winner(candidates, data_dir, store_uri, run_id, settings, stopped)
