"""Selection: score every candidate alike on validation, test the winner, publish it."""
import datetime
import tempfile
from pathlib import Path

from components import dataset, registry, serving
from components.errors import BakeoffError
from components.store import open_store

# metric name → direction that is better
METRICS = {"val_accuracy": "max", "val_loss": "min"}


def check_criterion(metric: str, direction: str) -> None:
    """Rejects an unknown metric or direction."""
    if metric not in METRICS:
        raise BakeoffError(f"unknown selection metric {metric!r}: use one of {', '.join(METRICS)}")
    if direction not in ("max", "min"):
        raise BakeoffError(f"unknown direction {direction!r}: use max or min")


def rank(candidates: list[dict], metric: str, direction: str) -> list[dict]:
    """Best first; ties go to the variant whose name sorts first, so reruns agree."""
    check_criterion(metric, direction)
    sign = -1 if direction == "max" else 1
    return sorted(candidates, key=lambda c: (sign * c[metric], c["variant"]))


def select_winner(
    candidates: list[dict],
    data_dir: str,
    store_uri: str,
    model_name: str,
    run_id: str,
    metric: str,
    direction: str,
) -> dict:
    """Scores, ranks, tests and publishes; returns the run's summary (the CLI's --json)."""
    if not candidates:
        raise BakeoffError("no candidates to select from: the config must list at least one variant")
    check_criterion(metric, direction)  # before minutes of evaluation
    registry.model_prefix(model_name)
    store = open_store(store_uri)
    data = open_store(data_dir)
    metadata = dataset.read_metadata(data)
    validation = dataset.read_shards(data, "validation")
    scored = []
    with tempfile.TemporaryDirectory(prefix="bakeoff-select-") as scratch:
        for candidate in candidates:
            model_dir = store.get_dir(f"{candidate['prefix']}/model", Path(scratch) / candidate["variant"])
            result = serving.evaluate(model_dir, validation.images, validation.labels)
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
        ranking = rank(scored, metric, direction)
        best = ranking[0]
        winner = next(c for c in candidates if c["variant"] == best["variant"])
        winner_dir = Path(scratch) / winner["variant"]
        test = dataset.read_shards(data, "test")
        test_result = serving.evaluate(winner_dir, test.images, test.labels)
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
            "selection": {"metric": metric, "direction": direction, "candidates": [c["variant"] for c in ranking]},
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
