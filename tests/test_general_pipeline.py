"""The committed pipelines/bakeoff.yaml is general: any number of variants, halving settings, source and image size
are run-form parameters; the halve steps work out their keeps and the rungs a run needs at run time."""

from __future__ import annotations

import builtins
import dataclasses
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bakeoff.components import defaults
from bakeoff.components.backends import prefork
from bakeoff.components.data.artifact import METADATA_FILE
from bakeoff.components.environment import ERROR_FILE_ENV
from bakeoff.components.search.halving import schedule
from bakeoff.components.spec import Halving
from bakeoff.components.storage import open_store, registry, runs
from bakeoff.components.storage.records import DatasetMetadata, Summary
from bakeoff.components.training import WORKER_PROGRAM
from bakeoff.pipelines import conformance
from bakeoff.pipelines.compiling import COMPILED, read_ir
from tests.images import RGB_CLASSES, write_rgb_folder


@pytest.fixture(scope="module")
def spec() -> dict:
    return read_ir(COMPILED.read_text())


@pytest.mark.unit
def test_the_run_form_holds_the_data_the_variants_and_the_halving(spec: dict) -> None:
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    assert {name: parameters[name]["parameterType"] for name in ("source", "image_size", "variants")} == {
        "source": "STRING",
        "image_size": "LIST",
        "variants": "LIST",
    }
    # the default file's halving and data, as defaults a run may change
    assert {name: parameters[name]["defaultValue"] for name in ("min_epochs", "max_epochs", "eta", "image_size")} == {
        "min_epochs": 3,
        "max_epochs": 20,
        "eta": 3,
        "image_size": [],
    }
    assert parameters["source"]["defaultValue"] == defaults.SOURCE
    assert f"over up to {defaults.MAX_RUNGS} rungs" in spec["pipelineInfo"]["description"]
    # ingest gets the run's source and image size
    ingest = spec["root"]["dag"]["tasks"]["ingest"]["inputs"]["parameters"]
    assert ingest["source"] == {"componentInputParameter": "source"}
    assert ingest["image_size"] == {"componentInputParameter": "image_size"}


def levels(spec: dict) -> list[dict]:
    """The search's levels, outermost first: the DAG's rung task, the halve task before it (none for rung 0), and the
    condition its DAG ran under (none for rung 0's)."""
    components, found = spec["components"], []
    tasks, condition = components["comp-search"]["dag"]["tasks"], None
    while True:
        (rung,) = [name for name in tasks if name.startswith("rung-")]
        halves = [name for name in tasks if name.startswith("halve")]
        found.append({"rung": tasks[rung], "halve": halves[0] if halves else None, "condition": condition})
        inner = [task for task in tasks.values() if task["componentRef"]["name"].startswith("comp-condition")]
        if not inner:
            return found
        (nested,) = inner
        condition = nested["triggerPolicy"]["condition"]
        tasks = components[nested["componentRef"]["name"]]["dag"]["tasks"]


@pytest.mark.unit
def test_rungs_and_keeps_are_decided_at_run_time_and_every_supported_backend_accepts_it(spec: dict) -> None:
    """MAX_RUNGS rungs, each after the first within a condition on the epoch the step before it worked out; no keep or
    stop epoch is a compiled constant."""
    for version in conformance.SUPPORTED:
        assert conformance.violations(spec, conformance.BACKENDS[version]) == [], version
    first, *later = levels(spec)
    assert [level["rung"]["componentRef"]["name"] for level in [first, *later]] == [
        f"comp-rung-{index}" for index in range(defaults.MAX_RUNGS)
    ]
    assert {name: first["rung"]["inputs"]["parameters"][name] for name in ("stop_epoch", "variants")} == {
        name: {"componentInputParameter": name} for name in ("stop_epoch", "variants")
    }
    before = "stop_epoch"  # the epoch the rung before trained to: rung 0's from check
    for level in later:
        # the halve step and this rung run only where the rung before stopped short of max_epochs
        assert level["condition"] == (
            f"int(inputs.parameter_values['pipelinechannel--{before}'])"
            " < int(inputs.parameter_values['pipelinechannel--max_epochs'])"
        )
        inputs = level["rung"]["inputs"]["parameters"]
        assert {name: inputs[name]["taskOutputParameter"] for name in ("stop_epoch", "variants")} == {
            "stop_epoch": {"producerTask": level["halve"], "outputParameterKey": "Output"},
            "variants": {"producerTask": level["halve"], "outputParameterKey": "variants"},
        }
        before = f"{level['halve']}-Output"
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks["search"]["inputs"]["parameters"]["stop_epoch"]["taskOutputParameter"] == {
        "producerTask": "check",
        "outputParameterKey": "epochs",
    }
    assert "search" in tasks["select"]["dependentTasks"]
    halves = [c for name, c in spec["components"].items() if name.startswith("comp-halve")]
    assert len(halves) == defaults.MAX_RUNGS - 1
    assert all("keep" not in c["inputDefinitions"]["parameters"] for c in halves)


def tiny_variants(count: int) -> list[dict]:
    """``count`` small MLPs, one worker each, with learning rates spread so that they rank apart."""
    return [
        {
            "name": f"v{index}",
            "model": {"type": "mlp", "hidden_units": [8]},
            "training": {"batch_size": 64, "learning_rate": 0.0005 * (1 + index % 7)},
            "workers": 1,
        }
        for index in range(count)
    ]


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., tuple[Summary, Path]]]:
    """Runs the committed file through kfp.local as the SDK loads it, on a folder store; ingest is cached across
    runs of one source. Replicas fork from a warm process, as `bakeoff run`'s do."""
    from kfp import components, local

    work = tmp_path_factory.mktemp("general")
    pipeline = components.load_component_from_file(str(COMPILED))
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(work / "pipeline-root"),
        enable_caching=True,
        cache_root=str(work / "cache"),
    )

    def run(variants: list[dict], **parameters: Any) -> tuple[Summary, Path]:
        store = work / f"store-{len(variants)}"
        task = pipeline(
            variants=variants,
            store=f"file://{store}",
            s3_endpoint="",
            backend="local",
            max_train_examples=128,
            validation_size=256,
            **parameters,
        )
        return Summary.from_json(task.output, "the select step's output"), store

    with pytest.MonkeyPatch.context() as patch, prefork.warm(WORKER_PROGRAM):
        patch.setenv(ERROR_FILE_ENV, str(work / "error"))
        patch.setattr(builtins, "print", builtins.print)  # kfp.local's threads leave it indented (local_run.py)
        yield run


def ingested(root: Path) -> dict[str, DatasetMetadata]:
    """Every Dataset the runs' ingest steps wrote below ``root``, by its source."""
    found = (DatasetMetadata.from_json(path.read_bytes(), "") for path in root.rglob(METADATA_FILE))
    return {metadata.source: metadata for metadata in found}


# count → halving settings: 1 variant goes straight to max_epochs; 9 halve twice, down to a lone survivor.
CASES = {1: Halving(1, 2, 2), 2: Halving(1, 2, 2), 9: Halving(1, 9, 3), 20: Halving(1, 2, 5)}


@pytest.mark.training
@pytest.mark.filterwarnings("ignore:.*non-Python base image")  # the image matters on a cluster; here the venv runs it
@pytest.mark.parametrize("count", list(CASES))
def test_the_committed_pipeline_runs_any_number_of_variants_through_the_rungs_they_need(
    count: int,
    committed: Callable[..., tuple[Summary, Path]],
    fashion_dir: Path,
    tmp_path: Path,
) -> None:
    """The schedule the plan shows, rung by rung: who entered, how many were kept, the epochs; select over the last
    rung's variants; the winner published. The 2-variant run reads another source, a class-folder tree of RGB PNG
    files resized by the run form's image_size: both reach ingest."""
    halving = CASES[count]
    source, image_size = fashion_dir, []
    if count == 2:  # another source and shape: 3 classes of RGB 32x32 PNG files, resized to 24x24 as ingest reads
        source, image_size = write_rgb_folder(tmp_path / "rgb", per_class=150, splits=("train", "test")), [24, 24]
    summary, store_path = committed(
        tiny_variants(count),
        source=str(source),
        image_size=image_size,
        min_epochs=halving.min_epochs,
        max_epochs=halving.max_epochs,
        eta=halving.eta,
    )
    store = open_store(f"file://{store_path}")
    planned = schedule(count, halving)
    records = runs.search_records(store, summary.run_id)
    assert [(r.rung, r.epochs, len(r.entered), len(r.kept)) for r in records] == [
        (rung.index, rung.epochs, rung.entering, rung.keep) for rung in planned[:-1]
    ]
    for earlier, later in itertools.pairwise(records):
        assert later.entered == [score.variant for score in earlier.kept]
    last = planned[-1]
    finalists = [score.variant for score in records[-1].kept] if records else [v["name"] for v in tiny_variants(count)]
    assert sorted(c.variant for c in summary.candidates) == sorted(finalists)
    for name in finalists:
        metrics = runs.rung_metrics(store, summary.run_id, name, last.index)
        assert (metrics.epochs, metrics.schedule_epochs) == (halving.max_epochs, halving.max_epochs)
    assert not any(store.exists(f"runs/{summary.run_id}/{name}/rung-{last.index + 1}.json") for name in finalists)
    (manifest,) = registry.list_versions(store, defaults.MODEL_NAME)
    assert manifest.run_id == summary.run_id and manifest.variant == summary.winner.variant
    dataset = ingested(store_path.parent / "pipeline-root")[str(source)]
    if image_size:
        assert (dataset.image_shape, dataset.class_names) == ([24, 24, 3], list(RGB_CLASSES))


FILE = """
source: /data/in-the-file
image_size: [48, 40]
search: {halving: {min_epochs: 2, max_epochs: 6, eta: 3}}
defaults: {workers: 1}
variants:
  - {name: a, model: {type: mlp, hidden_units: [8]}}
  - {name: b, model: {type: mlp, hidden_units: [16]}}
  - {name: c, model: {type: mlp, hidden_units: [32]}}
"""


@pytest.mark.unit
def test_plan_takes_the_files_data_and_halving_and_the_flags_in_their_place(
    tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture
) -> None:
    from bakeoff.components.search.calibration_cache import FILE as FILE_NAME
    from bakeoff.components.search.costs import Images
    from bakeoff.components.spec import load_config
    from bakeoff.pipelines.cli.main import main
    from tests import samples
    from tests.images import write_rgb_folder

    # plan lists the source before it prices it: two real folders, the file's and the flag's
    in_the_file = write_rgb_folder(tmp_path / "in-the-file", per_class=4, size=20)
    on_the_line = write_rgb_folder(tmp_path / "on-the-line", per_class=4, size=20)
    config = tmp_path / "file.yaml"
    config.write_text(FILE.replace("/data/in-the-file", str(in_the_file)))
    loaded = load_config(config)
    # costs cached at every shape these plans price, so nothing is measured
    shapes = [(48, 40, 3), (64, 32, 3), (20, 20, 3)]
    steps = [step for shape in shapes for step in samples.calibration(loaded, images=Images(8, shape, 3)).steps]
    (cost_cache / FILE_NAME).write_text(dataclasses.replace(samples.calibration(loaded), steps=steps).to_json())

    def plan(*flags: str) -> dict:
        assert main(["plan", "--json", "--config", str(config), *flags]) == 0
        return json.loads(capsys.readouterr().out)

    written = plan()
    assert (written["source"], written["image_size"]) == (str(in_the_file), [48, 40])
    assert written["search"]["halving"] == {"min_epochs": 2, "max_epochs": 6, "eta": 3}
    assert [(r["epochs"], r["entering"], r["keep"]) for r in written["rungs"]] == [(2, 3, 1), (6, 1, 1)]
    flagged = plan("--source", str(on_the_line), "--image-size", "64x32", "--max-epochs", "8", "--eta", "2")
    assert (flagged["source"], flagged["image_size"]) == (str(on_the_line), [64, 32])
    assert flagged["search"]["halving"] == {"min_epochs": 2, "max_epochs": 8, "eta": 2}
    assert [v["epochs"] for v in flagged["variants"]] == [8, 8, 8]  # every schedule follows max_epochs
    assert [(r["epochs"], r["entering"], r["keep"]) for r in flagged["rungs"]] == [(2, 3, 2), (4, 2, 1), (8, 1, 1)]
    assert plan("--image-size", "none", "--min-epochs", "6")["image_size"] == []
    # a file without halving gets it from both epoch flags
    config.write_text(config.read_text().replace("search: {halving: {min_epochs: 2, max_epochs: 6, eta: 3}}\n", ""))
    assert plan("--min-epochs", "1", "--max-epochs", "3")["search"]["halving"] == {
        "min_epochs": 1,
        "max_epochs": 3,
        "eta": defaults.HALVING_ETA,
    }


@pytest.mark.unit
def test_run_reads_the_files_source_unless_the_flag_names_another(
    tmp_path: Path, capsys: pytest.CaptureFixture, fashion_dir: Path
) -> None:
    """The source reaches the run before anything is written: a missing one is one line naming it."""
    from bakeoff.pipelines.cli.main import main

    config = tmp_path / "file.yaml"
    config.write_text(FILE.replace("/data/in-the-file", str(tmp_path / "missing")))
    store = tmp_path / "store"
    assert main(["run", "--config", str(config), "--store", str(store)]) == 1
    assert f"source '{tmp_path / 'missing'}' is not a folder" in capsys.readouterr().err
    assert main(["run", "--config", str(config), "--store", str(store), "--source", str(tmp_path / "other")]) == 1
    assert f"source '{tmp_path / 'other'}' is not a folder" in capsys.readouterr().err
    assert not store.exists()
