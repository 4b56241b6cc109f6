"""The winner: every candidate scored alike on validation, the best tested on test and published."""
import datetime
import tempfile
from pathlib import Path

from components.data import artifact
from components.errors import BakeoffError
from components.modeling.evaluation import evaluate
from components.selection.ranking import direction, rank
from components.storage import open_store, registry, runs


def select_winner(
    candidates: list[dict],
    data_dir: str,
    store_uri: str,
    model_name: str,
    run_id: str,
    metric: str,
) -> dict:
    """Scores, ranks, tests and publishes; returns the run's summary (the CLI's --json)."""
    if not candidates:
        raise BakeoffError("no candidates to select from: the config must list at least one variant")
    better = direction(metric)  # before minutes of evaluation
    registry.model_prefix(model_name)
    store = open_store(store_uri)
    data = open_store(data_dir)
    metadata = artifact.read_metadata(data)
    validation = artifact.read_shards(data, "validation")
    scored = []
    with tempfile.TemporaryDirectory(prefix="bakeoff-select-") as scratch:
        for candidate in candidates:
            model_dir = store.get_dir(f"{candidate['prefix']}/{runs.MODEL}", Path(scratch) / candidate["variant"])
            result = evaluate(model_dir, validation.images, validation.labels)
            training = candidate["metrics"]
            scored.append({
                "variant": candidate["variant"],
                "workers": training["workers"],
                "num_replicas_in_sync": training["num_replicas_in_sync"],
                "val_accuracy": result["accuracy"],
                "val_loss": result["loss"],
                "epochs": training["epochs"],
                "train_seconds": training["train_seconds"],
                "examples_per_second": training["examples_per_second"],
                "uri": candidate["uri"],
            })
        ranking = rank(scored, metric)
        best = ranking[0]
        winner = next(c for c in candidates if c["variant"] == best["variant"])
        winner_dir = Path(scratch) / winner["variant"]
        test = artifact.read_shards(data, "test")
        test_result = evaluate(winner_dir, test.images, test.labels)
        manifest = {
            "model": model_name,
            "run_id": run_id,
            "variant": winner["variant"],
            "spec": winner["spec"],
            "metrics": {
                "val_accuracy": best["val_accuracy"],
                "val_loss": best["val_loss"],
                "test_accuracy": test_result["accuracy"],
                "test_loss": test_result["loss"],
                "training": winner["metrics"],
            },
            "selection": {"metric": metric, "direction": better, "candidates": [c["variant"] for c in ranking]},
            "dataset": {"fingerprint": metadata["fingerprint"], "counts": metadata["counts"]},
            "source_uri": winner["uri"],
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        version = registry.publish(store, model_name, winner_dir, manifest)
    return {
        "run_id": run_id,
        "winner": {
            "variant": best["variant"],
            "version": version,
            "uri": store.uri_for(f"{registry.model_prefix(model_name)}/{version}"),
            "val_accuracy": best["val_accuracy"],
            "test_accuracy": test_result["accuracy"],
        },
        "candidates": ranking,
    }


def select_run(variants: list[str], data_dir: str, store_uri: str, model_name: str, run_id: str, metric: str) -> dict:
    """``select_winner`` over the variants that run ``run_id`` trained, read back from the store."""
    direction(metric)
    registry.model_prefix(model_name)  # both before reading anything
    store = open_store(store_uri)
    candidates = [runs.candidate(store, run_id, variant) for variant in variants]
    return select_winner(candidates, data_dir, store_uri, model_name, run_id, metric)
