"""Bad input to every command and config field: one error line, a non-zero exit, nothing written, nothing started."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bakeoff.pipelines.cli.main import main
from tests.conftest import BUCKET, free_port
from tests.fake_kfp_api import FakeKfpApi

pytestmark = pytest.mark.unit

BAKEOFF = str(Path(sys.executable).parent / "bakeoff")
# Variables that would point a command at a real store, cluster or API, or that main() exports.
ISOLATED_ENV = (
    "BAKEOFF_S3_ENDPOINT",
    "BAKEOFF_S3_INSECURE",
    "KF_PIPELINES_ENDPOINT",
    "KF_PIPELINES_TOKEN",
    "KF_PIPELINES_SA_TOKEN_PATH",
    "BAKEOFF_KFP_COOKIES",
    "KUBERNETES_SERVICE_HOST",
    "KUBECONFIG",
)
CNN: dict[str, Any] = {
    "name": "v",
    "model": {"type": "cnn", "filters": [8, 16], "dense_units": 32},
    "training": {"epochs": 1},
    "workers": 2,
}
MLP = {"name": "v", "model": {"type": "mlp", "hidden_units": [16]}, "training": {"epochs": 1}, "workers": 2}
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32  # enough for predict's check of the file type
REMOVE = object()  # a field value that drops the field


@dataclasses.dataclass
class Result:
    code: Any
    out: str
    err: str


@pytest.fixture
def bakeoff(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Result]:
    """main() in this process; argparse's exit becomes the code; no pipeline may start and no variable leaks out."""
    for name in ISOLATED_ENV:
        monkeypatch.setenv(name, "")  # recorded, so that what main() exports is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kube-config"))

    def started(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the local pipeline started: a bad input got past every check")

    monkeypatch.setattr("bakeoff.pipelines.local_run.run_local", started)

    def run(*args: str) -> Result:
        capsys.readouterr()
        code: int | str | None
        try:
            code = main(list(args))
        except SystemExit as exit:
            code = exit.code
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def assert_one_line(result: Result, pattern: str) -> None:
    """Exit 1 with only `bakeoff: error: ...` on stderr, or argparse's usage and its one error line with exit 2."""
    assert "Traceback" not in result.err, result.err
    errors = [line for line in result.err.splitlines() if "error:" in line]
    assert len(errors) == 1, result.err
    (line,) = errors
    if result.err.startswith("usage: "):
        assert re.match(r"bakeoff[a-z ]*: error: ", line) and result.err.rstrip().endswith(line) and result.code == 2, (
            result.err
        )
    else:
        assert line.startswith("bakeoff: error: ") and (result.code, result.err.strip()) == (1, line), result.err
    assert result.out == "", result.out
    assert re.search(pattern, line), f"{pattern!r} not in {line!r}"


def with_field(base: dict, field: str, value: Any) -> dict:
    """``base`` with the dotted ``field`` set to ``value`` (or dropped for REMOVE)."""
    variant = copy.deepcopy(base)
    *parents, last = field.split(".")
    node = variant
    for part in parents:
        node = node.setdefault(part, {})
    if value is REMOVE:
        del node[last]
    else:
        node[last] = value
    return variant


def write_config(path: Path, variant: dict) -> Path:
    path.write_text(yaml.safe_dump({"variants": [variant]}, allow_unicode=True), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------- config fields

# (field, value, what the line says after "<config>: "); cnn fields on CNN, the rest on MLP where it matters.
FIELDS = {
    "name unicode": ("name", "größe", r"variant 'größe': name: use lower-case letters, digits, '-' and '_'"),
    "name traversal": ("name", "../escape", r"variant '\.\./escape': name: use lower-case letters"),
    "name with a slash": ("name", "a/b", r"variant 'a/b': name: use lower-case"),
    "name upper case": ("name", "Big", r"variant 'Big': name: use lower-case"),
    "name kfp.local's log": ("name", "pipeline", r"variant 'pipeline': name: 'pipeline' names kfp.local's log in a"),
    "name empty": ("name", "", r"name: every variant needs a non-empty name, got ''"),
    "name a number": ("name", 5, r"name: every variant needs a non-empty name, got 5"),
    "name too long": ("name", "a" * 200, r"variant 'a{200}': name: must be at most 128 characters"),
    "model a string": ("model", "cnn", r"variant 'v': model.type: required: one of cnn, mlp"),
    "model.type missing": ("model.type", REMOVE, r"variant 'v': model.type: required"),
    "model.type unknown": ("model.type", "transformer", r"variant 'v': model.type: unknown architecture 'transformer'"),
    "model.type a list": ("model.type", ["cnn"], r"variant 'v': model.type: unknown architecture \['cnn'\]"),
    "model.type empty": ("model.type", "", r"variant 'v': model.type: unknown architecture ''"),
    "model unknown field": ("model.filterz", [1], r"variant 'v': model.filterz: unknown field"),
    "model.filters a string": ("model.filters", "8,16", r"variant 'v': model.filters: expected a list"),
    "model.filters empty": ("model.filters", [], r"variant 'v': model.filters: must list 1 to 16 layers, got 0"),
    "model.filters negative": (
        "model.filters",
        [8, -16],
        r"variant 'v': model.filters\[1\]: must be at least 1, got -16",
    ),
    "model.filters huge": ("model.filters", [10**9], r"variant 'v': model.filters\[0\]: must be at most 8192"),
    "model.filters of strings": ("model.filters", ["8"], r"variant 'v': model.filters\[0\]: expected int, got '8'"),
    "model.kernel_size zero": ("model.kernel_size", 0, r"variant 'v': model.kernel_size: must be at least 1, got 0"),
    "model.kernel_size negative": (
        "model.kernel_size",
        -3,
        r"variant 'v': model.kernel_size: must be at least 1, got -3",
    ),
    "model.kernel_size huge": (
        "model.kernel_size",
        2000,
        r"variant 'v': model.kernel_size: must be at most 1024, got 2000",
    ),
    "model.kernel_size fraction": ("model.kernel_size", 2.5, r"variant 'v': model.kernel_size: expected int, got 2\.5"),
    "model.dense_units zero": ("model.dense_units", 0, r"variant 'v': model.dense_units: must be at least 1"),
    "model.dense_units huge": ("model.dense_units", 10**12, r"variant 'v': model.dense_units: must be at most 8192"),
    "model.dropout negative": ("model.dropout", -0.1, r"variant 'v': model.dropout: must be in \[0, 1\), got -0\.1"),
    "model.dropout one": ("model.dropout", 1.0, r"variant 'v': model.dropout: must be in \[0, 1\)"),
    "model.dropout nan": ("model.dropout", float("nan"), r"variant 'v': model.dropout: must be in \[0, 1\), got nan"),
    "model.dropout a string": ("model.dropout", "0.5", r"variant 'v': model.dropout: expected float, got '0\.5'"),
    "model.batch_norm a string": (
        "model.batch_norm",
        "yes",
        r"variant 'v': model.batch_norm: expected bool, got 'yes'",
    ),
    "model.batch_norm a number": ("model.batch_norm", 1, r"variant 'v': model.batch_norm: expected bool, got 1"),
    "model.hidden_units negative": (
        "model.hidden_units",
        [-3],
        r"variant 'v': model.hidden_units\[0\]: must be at least 1, got -3",
    ),
    "model.hidden_units huge": (
        "model.hidden_units",
        [10**9],
        r"variant 'v': model.hidden_units\[0\]: must be at most 8192",
    ),
    "model.hidden_units too many": (
        "model.hidden_units",
        [8] * 17,
        r"variant 'v': model.hidden_units: must list 0 to 16 layers, got 17",
    ),
    "model.hidden_units a number": (
        "model.hidden_units",
        128,
        r"variant 'v': model.hidden_units: expected a list, got 128",
    ),
    "training a list": ("training", [1], r"variant 'v': training: expected a mapping"),
    "training unknown field": ("training.lr", 0.1, r"variant 'v': training.lr: unknown field"),
    "training.epochs zero": ("training.epochs", 0, r"variant 'v': training.epochs: must be at least 1, got 0"),
    "training.epochs negative": ("training.epochs", -1, r"variant 'v': training.epochs: must be at least 1, got -1"),
    "training.epochs huge": (
        "training.epochs",
        10**9,
        r"variant 'v': training.epochs: must be at most 1000, got 1000000000",
    ),
    "training.epochs fraction": ("training.epochs", 1.5, r"variant 'v': training.epochs: expected int, got 1\.5"),
    "training.epochs a string": ("training.epochs", "3", r"variant 'v': training.epochs: expected int, got '3'"),
    "training.epochs a bool": ("training.epochs", True, r"variant 'v': training.epochs: expected int, got True"),
    "training.batch_size zero": ("training.batch_size", 0, r"variant 'v': training.batch_size: must be at least 1"),
    "training.batch_size huge": (
        "training.batch_size",
        10**9,
        r"variant 'v': training.batch_size: must be at most 8192",
    ),
    "training.learning_rate zero": (
        "training.learning_rate",
        0,
        r"variant 'v': training.learning_rate: must be positive, got 0",
    ),
    "training.learning_rate negative": (
        "training.learning_rate",
        -0.1,
        r"variant 'v': training.learning_rate: must be positive, got -0\.1",
    ),
    "training.learning_rate inf": (
        "training.learning_rate",
        float("inf"),
        r"variant 'v': training.learning_rate: must be a finite number, got inf",
    ),
    "training.learning_rate nan": (
        "training.learning_rate",
        float("nan"),
        r"variant 'v': training.learning_rate: must be a finite number, got nan",
    ),
    "training.learning_rate huge": (
        "training.learning_rate",
        1e30,
        r"variant 'v': training.learning_rate: must be at most 10, got 1e\+30",
    ),
    "training.learning_rate a word": (
        "training.learning_rate",
        "fast",
        r"variant 'v': training.learning_rate: expected float, got 'fast'",
    ),
    "training.optimizer unknown": (
        "training.optimizer",
        "lbfgs",
        r"variant 'v': training.optimizer: unknown optimizer 'lbfgs'",
    ),
    "training.optimizer empty": ("training.optimizer", "", r"variant 'v': training.optimizer: unknown optimizer ''"),
    "training.optimizer a list": ("training.optimizer", ["adam"], r"variant 'v': training.optimizer: expected str"),
    "training.schedule unicode": (
        "training.schedule",
        "cösine",
        r"variant 'v': training.schedule: unknown schedule 'cösine'",
    ),
    "training.steps_per_execution zero": (
        "training.steps_per_execution",
        0,
        r"variant 'v': training.steps_per_execution: must be at least 1",
    ),
    "training.steps_per_execution huge": (
        "training.steps_per_execution",
        10**9,
        r"variant 'v': training.steps_per_execution: must be at most 10000",
    ),
    "training.random_flip a string": (
        "training.random_flip",
        "yes",
        r"variant 'v': training.random_flip: expected bool",
    ),
    "training.random_shift negative": (
        "training.random_shift",
        -1,
        r"variant 'v': training.random_shift: must be at least 0, got -1",
    ),
    "training.random_shift past a third of the image": (
        "training.random_shift",
        9,
        r"variant 'v': training.random_shift: must be at most 8, got 9",
    ),
    "training.ema_momentum 1, a frozen average": (
        "training.ema_momentum",
        1.0,
        r"variant 'v': training.ema_momentum: must be in \[0, 1\) \(0: off; e\.g\. 0\.99\), got 1\.0",
    ),
    "training.ema_momentum negative": (
        "training.ema_momentum",
        -0.5,
        r"variant 'v': training.ema_momentum: must be in \[0, 1\) .*got -0\.5",
    ),
    "training.ema_momentum not a number": (
        "training.ema_momentum",
        float("nan"),
        r"variant 'v': training.ema_momentum: must be in \[0, 1\) .*got nan",
    ),
    "workers zero": ("workers", 0, r"variant 'v': workers: must be at least 1, got 0"),
    "workers negative": ("workers", -1, r"variant 'v': workers: must be at least 1, got -1"),
    "workers huge": ("workers", 10**9, r"variant 'v': workers: must be at most 64, got 1000000000"),
    "workers a string": ("workers", "2", r"variant 'v': workers: expected int, got '2'"),
    "workers a fraction": ("workers", 2.5, r"variant 'v': workers: expected int, got 2\.5"),
    "resources a string": ("resources", "big", r"variant 'v': resources: expected a mapping"),
    "resources unknown field": ("resources.tpu", 1, r"variant 'v': resources.tpu: unknown field"),
    "resources.cpu a word": (
        "resources.cpu",
        "lots",
        r"variant 'v': resources.cpu: must be a CPU quantity .*got 'lots'",
    ),
    "resources.cpu negative": ("resources.cpu", -1, r"variant 'v': resources.cpu: must be a CPU quantity .*got '-1'"),
    "resources.cpu zero": ("resources.cpu", "0", r"variant 'v': resources.cpu: must be a CPU quantity above 0"),
    "resources.cpu empty": ("resources.cpu", "", r"variant 'v': resources.cpu: must be a CPU quantity .*got ''"),
    "resources.cpu huge": ("resources.cpu", "100000", r"variant 'v': resources.cpu: .*at most 256 cores.*got '100000'"),
    "resources.memory a word": (
        "resources.memory",
        "lots",
        r"variant 'v': resources.memory: must be a memory quantity from 64Mi to 4Ti",
    ),
    "resources.memory negative": ("resources.memory", "-2Gi", r"variant 'v': resources.memory: .*got '-2Gi'"),
    "resources.memory bytes": ("resources.memory", 2, r"variant 'v': resources.memory: .*got '2'"),
    "resources.memory huge": ("resources.memory", "100Ti", r"variant 'v': resources.memory: .*got '100Ti'"),
    "resources.memory empty": ("resources.memory", "", r"variant 'v': resources.memory: .*got ''"),
    "resources.gpu negative": ("resources.gpu", -1, r"variant 'v': resources.gpu: must be at least 0, got -1"),
    "resources.gpu huge": ("resources.gpu", 10**6, r"variant 'v': resources.gpu: must be at most 16"),
    "resources.gpu a string": ("resources.gpu", "1", r"variant 'v': resources.gpu: expected int, got '1'"),
}


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    return {"store": tmp_path / "store", "work": tmp_path / "work", "out": tmp_path / "out" / "bakeoff.yaml"}


def run_args(config: Path, paths: dict[str, Path], source: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--config",
        str(config),
        "--store",
        str(paths["store"]),
        "--work-dir",
        str(paths["work"]),
        "--source",
        str(source),
        "--max-train-examples",
        "1024",
        *extra,
    ]


def assert_nothing_written(paths: dict[str, Path]) -> None:
    for what in ("store", "work", "out"):
        assert not paths[what].exists(), f"{what} was created: {paths[what]}"
    assert not paths["out"].parent.exists()


@pytest.mark.parametrize("field, value, message", FIELDS.values(), ids=FIELDS.keys())
def test_a_bad_config_field_fails_run_and_compile_in_one_line(
    bakeoff, paths: dict[str, Path], fashion_dir: Path, tmp_path: Path, field: str, value: Any, message: str
) -> None:
    base = MLP if field.startswith("model.hidden_units") else CNN
    config = write_config(tmp_path / "variants.yaml", with_field(base, field, value))
    for args in (run_args(config, paths, fashion_dir), ["compile", "--config", str(config), "-o", str(paths["out"])]):
        result = bakeoff(*args)
        assert_one_line(result, "^bakeoff: error: " + re.escape(f"{config}: ") + message)
        assert_nothing_written(paths)


# Variants that do not fit the images: only the dataset's size decides, so compile takes them and run refuses.
MISFITS = {
    "model.filters too deep": (
        "model.filters",
        [8, 8, 8, 8],
        r"variant 'v': model.filters: 4 convolutions of kernel_size 3 leave no pixels of the 28x28 image",
    ),
    "model.kernel_size larger than the image": (
        "model.kernel_size",
        99,
        r"variant 'v': model.kernel_size: must be at most 28 for 28x28 images, got 99",
    ),
}


@pytest.mark.parametrize("field, value, message", MISFITS.values(), ids=MISFITS.keys())
def test_a_variant_that_does_not_fit_the_images_fails_run_in_one_line_and_compiles(
    bakeoff, paths: dict[str, Path], fashion_dir: Path, tmp_path: Path, field: str, value: Any, message: str
) -> None:
    config = write_config(tmp_path / "variants.yaml", with_field(CNN, field, value))
    result = bakeoff(*run_args(config, paths, fashion_dir))
    assert_one_line(result, "^bakeoff: error: " + re.escape(f"{config}: ") + message)
    assert_nothing_written(paths)
    compiled = bakeoff("compile", "--config", str(config), "-o", str(paths["out"]))
    assert compiled.code in (0, None), compiled.err


CONFIG_FILES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "missing": (lambda d: d / "none.yaml", r"cannot read config '.*none\.yaml' \(No such file or directory\)"),
    "a folder": (lambda d: d, r"cannot read config '.*' \(Is a directory\)"),
    "not UTF-8": (
        lambda d: (d / "bin.yaml", (d / "bin.yaml").write_bytes(b"\xff\xfe\x00variants"))[0],
        r"config '.*bin\.yaml' is not UTF-8 text \(byte 0\)",
    ),
    "endless": (lambda d: Path("/dev/zero"), r"config '/dev/zero' is larger than 1 MiB"),
    "empty": (
        lambda d: (d / "empty.yaml", (d / "empty.yaml").write_text(""))[0],
        r"empty\.yaml: spec: expected a mapping",
    ),
    "malformed YAML": (
        lambda d: (d / "bad.yaml", (d / "bad.yaml").write_text("variants: [{name: a"))[0],
        r"bad\.yaml: malformed YAML",
    ),
    "python tag": (
        lambda d: (d / "tag.yaml", (d / "tag.yaml").write_text("variants: !!python/object:os.system {}"))[0],
        r"tag\.yaml: malformed YAML",
    ),
    "no variants": (
        lambda d: (d / "none.yaml", (d / "none.yaml").write_text("variants: []"))[0],
        r"variants: expected a non-empty list",
    ),
    "variants a mapping": (
        lambda d: (d / "map.yaml", (d / "map.yaml").write_text("variants: {name: a}"))[0],
        r"variants: expected a non-empty list",
    ),
    "a variant a string": (
        lambda d: (d / "str.yaml", (d / "str.yaml").write_text("variants: [cnn]"))[0],
        r"variants: each variant must be a mapping, got 'cnn'",
    ),
    "duplicate names": (
        lambda d: (
            d / "dup.yaml",
            (d / "dup.yaml").write_text("variants: [{name: a, model: {type: mlp}}, {name: a, model: {type: cnn}}]"),
        )[0],
        r"variant 'a': name: duplicate variant name",
    ),
    "unknown top-level field": (
        lambda d: (d / "top.yaml", (d / "top.yaml").write_text("variant: []"))[0],
        r"variant: unknown top-level field",
    ),
    "defaults a list": (
        lambda d: (
            d / "def.yaml",
            (d / "def.yaml").write_text("defaults: [1]\nvariants: [{name: a, model: {type: mlp}}]"),
        )[0],
        r"defaults: expected a mapping",
    ),
    "unicode path, missing": (lambda d: d / "variantes-é.yaml", r"cannot read config '.*variantes-é\.yaml'"),
    "image_size out of range": (
        lambda d: (
            d / "size.yaml",
            (d / "size.yaml").write_text("image_size: [4, 4]\nvariants: [{name: a, model: {type: mlp}}]"),
        )[0],
        r"size\.yaml: image_size: \[4, 4\] is no image size: give \[\] for the source's own size, or \[HEIGHT, WIDTH\]"
        r" with each side 8 to 1024 pixels$",
    ),
    "image_size a word": (
        lambda d: (
            d / "word.yaml",
            (d / "word.yaml").write_text("image_size: big\nvariants: [{name: a, model: {type: mlp}}]"),
        )[0],
        r"word\.yaml: image_size: 'big' is no image size",
    ),
}


@pytest.mark.parametrize("make, message", CONFIG_FILES.values(), ids=CONFIG_FILES.keys())
def test_an_unreadable_or_malformed_config_fails_in_one_line(
    bakeoff, paths: dict[str, Path], fashion_dir: Path, tmp_path: Path, make: Callable[[Path], Path], message: str
) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    config = make(folder)
    for args in (run_args(config, paths, fashion_dir), ["compile", "--config", str(config), "-o", str(paths["out"])]):
        assert_one_line(bakeoff(*args), "^bakeoff: error: .*" + message)
        assert_nothing_written(paths)


# ---------------------------------------------------------------------------------------------- run

RUN_FLAGS = {
    "model name traversal": (["--model-name", "../x"], r"model name '\.\./x' is not usable in a path"),
    "model name with a slash": (["--model-name", "a/b"], r"model name 'a/b' is not usable in a path"),
    "model name empty": (["--model-name", ""], r"model name '' is not usable in a path"),
    "model name unicode": (["--model-name", "modèle"], r"model name 'modèle' is not usable in a path"),
    "unknown metric": (["--metric", "bogus"], r"argument --metric: invalid choice: 'bogus'"),
    "min improvement nan": (["--min-improvement", "nan"], r"min improvement nan must be in \[0, 1\)"),
    "min improvement negative": (["--min-improvement", "-1"], r"min improvement -1\.0 must be in \[0, 1\)"),
    "min improvement huge": (["--min-improvement", "1e300"], r"min improvement 1e\+300 must be in \[0, 1\)"),
    "confidence 1": (["--confidence", "1"], r"confidence 1\.0 must be in \[0, 1\): the paired test's level"),
    "min improvement a word": (
        ["--min-improvement", "some"],
        r"argument --min-improvement: invalid float value: 'some'",
    ),
    "epochs zero": (["--epochs", "0"], r"argument --epochs: --epochs must be at least 1, got 0"),
    "epochs huge": (["--epochs", "1000000000"], r"argument --epochs: --epochs must be at most 1000, got 1000000000"),
    "epochs a word": (["--epochs", "many"], r"argument --epochs: --epochs takes a whole number, got 'many'"),
    "workers negative": (["--workers", "-2"], r"argument --workers: --workers must be at least 1, got -2"),
    "workers huge": (
        ["--workers", "1000000000"],
        r"argument --workers: --workers must be at most 8 \(the shards a local run ingests\)",
    ),
    "workers beyond the shards": (["--workers", "9"], r"argument --workers: --workers must be at most 8"),
    "max train examples zero": (
        ["--max-train-examples", "0"],
        r"argument --max-train-examples: --max-train-examples must be at least 1",
    ),
    "parallelism huge": (
        ["--parallelism", "100000000000000000000"],
        r"argument --parallelism: --parallelism must be at most 64",
    ),
    "timeout zero": (["--timeout", "0"], r"argument --timeout: --timeout must be at least 1, got 0"),
    "timeout huge": (["--timeout", "100000000000000000000"], r"argument --timeout: --timeout must be at most 604800"),
    "budget a word": (
        ["--budget", "soon"],
        r"argument --budget: --budget takes a time such as 15m, 90s or 1h \(or none\), got 'soon'",
    ),
    "budget unknown unit": (["--budget", "15d"], r"argument --budget: --budget takes a time such as 15m"),
    "budget zero": (["--budget", "0s"], r"argument --budget: --budget must be above 0 and at most 10080 min, got '0s'"),
    "budget over a week": (["--budget", "169h"], r"argument --budget: --budget must be above 0 and at most 10080 min"),
    "source missing": (
        ["--source", "/nonexistent/ü"],
        r"source '/nonexistent/ü' is not a folder, an s3:// prefix or tfds:NAME",
    ),
    "image size too small": (
        ["--image-size", "4x4"],
        r"argument --image-size: --image-size takes HEIGHTxWIDTH \(e\.g\. 64x64, each side 8 to 1024\) or none,"
        r" got '4x4'$",
    ),
    "image size one side": (["--image-size", "64"], r"argument --image-size: --image-size takes HEIGHTxWIDTH"),
    "eta one": (["--eta", "1"], r"argument --eta: --eta must be at least 2 \(each rung keeps 1/eta\), got 1$"),
    "max epochs zero": (["--max-epochs", "0"], r"argument --max-epochs: --max-epochs must be at least 1, got 0$"),
    "eta without halving": (
        ["--eta", "2"],
        r"--eta change successive halving, which .*variants\.yaml does not use: pass --min-epochs and --max-epochs"
        r" to halve, or add search\.halving to the file$",
    ),
    "min epochs above max": (
        ["--min-epochs", "5", "--max-epochs", "3"],
        r"--min-epochs 5 is above --max-epochs 3: swap them \(min_epochs is the first rung's, at most max_epochs\)$",
    ),
    "store scheme unknown": (["--store", "ftp://host/x"], r"store 'ftp://host/x' has an unknown scheme 'ftp'"),
    "store scheme http": (["--store", "http://host/x"], r"store 'http://host/x' has an unknown scheme 'http'"),
    "store empty": (["--store", ""], r"--store is empty"),
    "store s3 without endpoint": (["--store", "s3://bucket/x"], r"store 's3://bucket/x' needs an S3 endpoint"),
    "store s3 without bucket": (
        ["--store", "s3:///x", "--s3-endpoint", "127.0.0.1:1"],
        r"store 's3:///x' names no bucket",
    ),
}


@pytest.mark.parametrize("flags, message", RUN_FLAGS.values(), ids=RUN_FLAGS.keys())
def test_a_bad_run_flag_fails_in_one_line_before_ingest(
    bakeoff, paths: dict[str, Path], fashion_dir: Path, tmp_path: Path, flags: list[str], message: str
) -> None:
    config = write_config(tmp_path / "variants.yaml", CNN)
    assert_one_line(bakeoff(*run_args(config, paths, fashion_dir), *flags), message)
    assert_nothing_written(paths)


def test_more_workers_than_local_shards_fails_before_ingest(
    bakeoff, paths: dict[str, Path], fashion_dir: Path, tmp_path: Path
) -> None:
    """9 workers is a valid config for a cluster that ingests more shards, but not for a local run of 8."""
    config = write_config(tmp_path / "variants.yaml", with_field(CNN, "workers", 9))
    assert_one_line(
        bakeoff(*run_args(config, paths, fashion_dir)),
        r"^bakeoff: error: variant 'v': workers=9 exceeds the 8 shards a local run ingests: use at most 8 workers$",
    )
    assert_nothing_written(paths)


def empty_folder(root: Path) -> Path:
    root.mkdir()
    return root


def one_class(root: Path) -> Path:
    (root / "cats").mkdir(parents=True)
    (root / "cats" / "a.png").write_bytes(PNG)
    return root


def empty_class(root: Path) -> Path:
    one_class(root)
    (root / "dogs").mkdir()
    (root / "dogs" / "b.png").write_bytes(PNG)
    (root / "owls").mkdir()
    return root


# A source ingest would refuse on its listing: `run` and `plan` list it first, so its line comes before anything starts.
BAD_SOURCES: dict[str, tuple[Callable[[Path], Path | str], str]] = {
    "an empty folder": (
        empty_folder,
        r"source holds no images in class folders: put each class's \.png/.* files in .*source/<class>/",
    ),
    "one class": (
        one_class,
        r"source holds one class \('cats'\): a classifier needs at least two class folders$",
    ),
    "an empty class folder": (
        empty_class,
        r"source/owls holds no images: put its \.png/.* files there or remove the folder$",
    ),
    "an unknown TFDS name": (
        lambda root: "tfds:no_such_dataset_here",
        r"tfds:no_such_dataset_here: no TFDS dataset 'no_such_dataset_here' .*: check the name and version",
    ),
}


@pytest.mark.parametrize("command", ["run", "plan"])
@pytest.mark.parametrize("make, message", BAD_SOURCES.values(), ids=BAD_SOURCES.keys())
def test_a_bad_source_is_one_line_before_anything_starts(
    bakeoff,
    paths: dict[str, Path],
    tmp_path: Path,
    cost_cache: Path,
    command: str,
    make: Callable[[Path], Path | str],
    message: str,
) -> None:
    """No pipeline, no store, no work folder, and no cost measured (plan's calibration would take minutes)."""
    config = write_config(tmp_path / "variants.yaml", CNN)
    source = str(make(tmp_path / "source"))
    args = (
        run_args(config, paths, Path(source))
        if command == "run"
        else ["plan", "--config", str(config), "--source", source]
    )
    assert_one_line(bakeoff(*args), message)
    assert_nothing_written(paths)
    assert list(cost_cache.iterdir()) == []


@pytest.fixture
def s3_prefix(s3_env: str, tmp_path: Path) -> Iterator[tuple[str, Callable[[], list[str]]]]:
    """A fresh prefix in the test bucket and a function that lists every object under it."""
    import minio

    prefix = f"bad-input/{tmp_path.name}"
    client = minio.Minio(
        s3_env,
        access_key=os.environ["AWS_ACCESS_KEY_ID"],
        secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        secure=False,
        region="us-east-1",
    )
    yield (
        f"s3://{BUCKET}/{prefix}",
        lambda: [o.object_name for o in client.list_objects(BUCKET, prefix=prefix + "/", recursive=True)],
    )


S3_CASES = {
    "variant traversal": ({"name": "../escape"}, [], r"variant '\.\./escape': name: use lower-case"),
    "epochs huge": ({"training": {"epochs": 10**9}}, [], r"training.epochs: must be at most 1000"),
    "model name traversal": ({}, ["--model-name", "../../x"], r"model name '\.\./\.\./x' is not usable in a path"),
    "epochs flag huge": ({}, ["--epochs", "99999"], r"--epochs must be at most 1000"),
}


@pytest.mark.parametrize("patch, flags, message", S3_CASES.values(), ids=S3_CASES.keys())
def test_bad_input_writes_nothing_to_an_s3_store(
    bakeoff,
    s3_prefix,
    paths: dict[str, Path],
    fashion_dir: Path,
    tmp_path: Path,
    patch: dict,
    flags: list[str],
    message: str,
) -> None:
    store, objects = s3_prefix
    variant = {**CNN, **patch, "training": {**CNN["training"], **patch.get("training", {})}}
    config = write_config(tmp_path / "variants.yaml", variant)
    args = run_args(config, paths, fashion_dir, "--store", store, *flags)
    assert_one_line(bakeoff(*args), message)
    assert objects() == []
    assert not paths["work"].exists()


@pytest.mark.parametrize("command", ["run", "plan"])
@pytest.mark.parametrize(
    "keys, message", [("right", r"is empty: upload the class folders there"), ("wrong", r"refused the credentials")]
)
def test_an_s3_source_that_cannot_be_listed_is_one_line_before_anything_starts(
    bakeoff,
    s3_prefix,
    paths: dict[str, Path],
    tmp_path: Path,
    cost_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    keys: str,
    message: str,
) -> None:
    """An empty prefix, or one these keys may not list: its line, and nothing started, written or measured."""
    source, objects = s3_prefix
    if keys == "wrong":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    config = write_config(tmp_path / "variants.yaml", CNN)
    args = run_args(config, paths, tmp_path) if command == "run" else ["plan", "--config", str(config)]
    args = [*args, "--source", source]  # the last --source counts
    assert_one_line(bakeoff(*args), re.escape(f"{source!r}") + ".*" + message)
    assert_nothing_written(paths)
    assert list(cost_cache.iterdir()) == [] and objects() == []


@pytest.mark.parametrize("name", ["../escape", "größe"])
def test_the_real_command_refuses_a_bad_variant_name_before_ingest(
    s3_prefix, fashion_dir: Path, tmp_path: Path, name: str
) -> None:
    """The console script, end to end: one line, exit 1, no kfp.local work dir, no object in the S3 store."""
    store, objects = s3_prefix
    config = write_config(tmp_path / "variants.yaml", with_field(CNN, "name", name))
    result = subprocess.run(
        [
            BAKEOFF,
            "run",
            "--config",
            str(config),
            "--store",
            store,
            "--work-dir",
            str(tmp_path / "work"),
            "--source",
            str(fashion_dir),
            "--max-train-examples",
            "1024",
        ],
        cwd=tmp_path,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_one_line(
        Result(result.returncode, result.stdout, result.stderr), re.escape(f"variant {name!r}: name: use lower-case")
    )
    assert objects() == [] and not (tmp_path / "work").exists()


# -------------------------------------------------------------------------------------- compile

COMPILE_FLAGS = {
    "image empty": (["--image", ""], r"--image '' is not an image reference"),
    "image with a space": (["--image", "my image:1"], r"--image 'my image:1' is not an image reference"),
    "image unicode": (["--image", "régistry/bakeoff:1"], r"--image 'régistry/bakeoff:1' is not an image reference"),
    "store empty": (["--store", ""], r"--store '' is not one the cluster's steps can reach"),
    "store scheme unknown": (
        ["--store", "ftp://host/x"],
        r"--store 'ftp://host/x' is not one the cluster's steps can reach",
    ),
    "store a local folder": (
        ["--store", "/tmp/store"],
        r"--store '/tmp/store' is not one the cluster's steps can reach",
    ),
    "store without bucket": (["--store", "s3:///x"], r"--store 's3:///x' is not one"),
    "parallelism zero": (["--parallelism", "0"], r"argument --parallelism: --parallelism must be at least 1"),
    "parallelism past int32": (
        ["--parallelism", "3000000000"],
        r"argument --parallelism: --parallelism must be at most 64",
    ),
}


@pytest.mark.parametrize("flags, message", COMPILE_FLAGS.values(), ids=COMPILE_FLAGS.keys())
def test_a_bad_compile_flag_fails_in_one_line_and_writes_nothing(
    bakeoff, paths: dict[str, Path], flags: list[str], message: str
) -> None:
    assert_one_line(bakeoff("compile", "-o", str(paths["out"]), *flags), message)
    assert_nothing_written(paths)


def test_compile_to_an_unwritable_place_fails_in_one_line(bakeoff, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert_one_line(
        bakeoff("compile", "-o", str(tmp_path / "file" / "bakeoff.yaml")),
        r"cannot write '.*file/bakeoff\.yaml' \((Not a directory|File exists)\)",
    )
    assert_one_line(bakeoff("compile", "-o", str(tmp_path)), r"cannot write '.*' \(Is a directory\)")


# ------------------------------------------------------------------------------- models list, serve

STORE_FLAGS = {
    "store scheme unknown": (["--store", "ftp://host/x"], r"store 'ftp://host/x' has an unknown scheme 'ftp'"),
    "store empty": (["--store", ""], r"--store is empty"),
    "store s3 without endpoint": (["--store", "s3://bucket/x"], r"store 's3://bucket/x' needs an S3 endpoint"),
    "model name traversal": (["--model-name", "../x"], r"model name '\.\./x' is not usable in a path"),
    "model name empty": (["--model-name", ""], r"model name '' is not usable in a path"),
}
SERVE_FLAGS = {
    "version zero": (["--version", "0"], r"argument --version: --version takes a version number or 'latest', got '0'"),
    "version negative": (["--version", "-1"], r"argument --version: --version takes a version number or 'latest'"),
    "version a word": (["--version", "newest"], r"argument --version: --version takes a version number or 'latest'"),
    "poll seconds zero": (["--poll-seconds", "0"], r"argument --poll-seconds: --poll-seconds takes a positive number"),
    "poll seconds nan": (["--poll-seconds", "nan"], r"argument --poll-seconds: --poll-seconds takes a positive number"),
    "port a word": (["--port", "http"], r"argument --port: a port is a whole number from 1 to 65535, got 'http'"),
    "port negative": (["--port=-1"], r"argument --port: a port is a whole number from 1 to 65535, got '-1'"),
    "port too big": (["--port", "70000"], r"argument --port: a port is a whole number from 1 to 65535, got '70000'"),
    "grpc port too big": (["--grpc-port", "65536"], r"argument --grpc-port: a port is a whole number from 1 to 65535"),
}


@pytest.mark.parametrize("command", [["models", "list"], ["serve"]], ids=["models list", "serve"])
@pytest.mark.parametrize("flags, message", STORE_FLAGS.values(), ids=STORE_FLAGS.keys())
def test_a_bad_store_or_model_name_fails_models_list_and_serve_in_one_line(
    bakeoff, tmp_path: Path, command: list[str], flags: list[str], message: str
) -> None:
    store = tmp_path / "store"
    assert_one_line(bakeoff(*command, "--store", str(store), *flags), message)
    assert not store.exists()


@pytest.mark.parametrize("flags, message", SERVE_FLAGS.values(), ids=SERVE_FLAGS.keys())
def test_a_bad_serve_flag_fails_in_one_line(bakeoff, tmp_path: Path, flags: list[str], message: str) -> None:
    store = tmp_path / "store"
    assert_one_line(bakeoff("serve", "--store", str(store), *flags), message)
    assert not store.exists()


# ---------------------------------------------------------------------------------------- predict


def test_bad_predict_input_fails_in_one_line(bakeoff, tmp_path: Path) -> None:
    image, text = tmp_path / "shirt.png", tmp_path / "notes.txt"
    image.write_bytes(PNG)
    text.write_text("not an image")
    free = f"http://127.0.0.1:{free_port()}"
    cases = [
        (["predict"], r"bakeoff predict: error: the following arguments are required: IMAGE"),
        (["predict", str(tmp_path / "none.png")], r"cannot read '.*none\.png' \(No such file or directory\)"),
        (["predict", str(tmp_path)], r"cannot read '.*' \(Is a directory\)"),
        (["predict", str(text)], r"'.*notes\.txt' is not a PNG or JPEG file"),
        (["predict", str(image), "--top", "0"], r"argument --top: --top must be at least 1, got 0"),
        (["predict", str(image), "--url", "gopher://127.0.0.1:1"], r"no model server answers at gopher://"),
        (["predict", str(image), "--url", free], r"no model server answers at http://127\.0\.0\.1:\d+"),
        # Refused here, though nothing listens at --url: the name never reaches a server.
        (
            ["predict", str(image), "--url", free, "--model-name", "../x"],
            r"model name '\.\./x' is not usable in a path",
        ),
    ]
    for args, message in cases:
        assert_one_line(bakeoff(*args), message)


# ----------------------------------------------------------------------------------------- deploy

DEPLOY_FLAGS = {
    "model name traversal": (["--model-name", "../x"], r"model name '\.\./x' cannot name an InferenceService"),
    "model name upper case": (["--model-name", "Fashion"], r"model name 'Fashion' cannot name an InferenceService"),
    "model name empty": (["--model-name", ""], r"model name '' cannot name an InferenceService"),
    "namespace empty": (["--namespace", " "], r"--namespace is empty"),
    "version zero": (["--version", "0"], r"argument --version: --version must be at least 1, got 0"),
    "timeout a word": (["--timeout", "soon"], r"argument --timeout: --timeout takes a whole number"),
    # Checked before deploy reaches for the Kubernetes API, which here is none.
    "store scheme unknown": (
        ["--store", "ftp://host/x", "--version", "1"],
        r"store 'ftp://host/x' is not one KServe can read",
    ),
}


@pytest.mark.parametrize("flags, message", DEPLOY_FLAGS.values(), ids=DEPLOY_FLAGS.keys())
def test_a_bad_deploy_flag_fails_in_one_line(bakeoff, flags: list[str], message: str) -> None:
    assert_one_line(bakeoff("deploy", *flags), message)


# ----------------------------------------------------------------------------- the KFP commands


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeKfpApi]:
    from kfp.client import client

    monkeypatch.setattr(client.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    with FakeKfpApi() as api:
        yield api


KFP_COMMANDS = {"upload": ["upload"], "submit": ["submit"], "schedule": ["schedule", "--every", "1d"]}
KFP_FLAGS = {
    "variant traversal": (None, r"variant '\.\./escape': name: use lower-case"),
    "image with a space": (["--image", "my image"], r"--image 'my image' is not an image reference"),
    "store scheme unknown": (
        ["--store", "ftp://host/x"],
        r"--store 'ftp://host/x' is not one the cluster's steps can reach",
    ),
    "parallelism huge": (["--parallelism", "100000000000000000000"], r"--parallelism must be at most 64"),
    "host scheme unknown": (["--host", "ftp://127.0.0.1:1"], r"--host 'ftp://127\.0\.0\.1:1' is not an http\(s\) URL"),
    "namespace traversal": (
        ["--namespace", "../kubeflow"],
        r"--namespace '\.\./kubeflow' is not a Kubernetes namespace",
    ),
    "namespace empty": (["--namespace", ""], r"--namespace '' is not a Kubernetes namespace"),
    "namespace upper case": (["--namespace", "Team"], r"--namespace 'Team' is not a Kubernetes namespace"),
    "token with a line break": (
        ["--token", "abc\r\nX-Admin: yes"],
        r"--token holds a line break, a control or a non-ASCII character",
    ),
    "token unicode": (["--token", "tøken"], r"--token holds a line break, a control or a non-ASCII character"),
    "token file missing": (
        ["--token-file", "/nonexistent/token"],
        r"cannot read --token-file '/nonexistent/token' \(No such file or directory\)",
    ),
    "token and token file": (
        ["--token", "t", "--token-file", "/dev/null"],
        r"argument --token-file: not allowed with argument --token",
    ),
    "cookies with a line break": (["--cookies", "a=b\nc=d"], r"--cookies holds a line break"),
    "cookies empty": (["--cookies", " "], r"--cookies is empty"),
    "cookies and cookies file": (
        ["--cookies", "a=b", "--cookies-file", "/dev/null"],
        r"argument --cookies-file: not allowed with argument --cookies",
    ),
    "insecure and ca-cert": (
        ["--insecure", "--ca-cert", "/nonexistent.pem"],
        r"--insecure and --ca-cert are both given",
    ),
}


@pytest.mark.parametrize("command", KFP_COMMANDS.values(), ids=KFP_COMMANDS.keys())
@pytest.mark.parametrize("flags, message", KFP_FLAGS.values(), ids=KFP_FLAGS.keys())
def test_bad_input_to_a_kfp_command_fails_in_one_line_and_sends_nothing(
    bakeoff, fake: FakeKfpApi, tmp_path: Path, command: list[str], flags: list[str] | None, message: str
) -> None:
    extra = (
        flags
        if flags is not None
        else ["--config", str(write_config(tmp_path / "variants.yaml", with_field(CNN, "name", "../escape")))]
    )
    host = [] if "--host" in extra else ["--host", fake.url]
    assert_one_line(bakeoff(*command, *host, *extra), message)
    assert fake.calls == [] and fake.created() == dict.fromkeys(fake.created(), 0)


SCHEDULES_CASES = {
    "id traversal": (["enable", "../../pipelines/p1"], r"'\.\./\.\./pipelines/p1' is not a recurring run id"),
    "id with a query": (["disable", "abc?namespace=kubeflow"], r"'abc\?namespace=kubeflow' is not a recurring run id"),
    "id empty": (["delete", ""], r"'' is not a recurring run id"),
    "id unicode": (["enable", "ïd"], r"'ïd' is not a recurring run id"),
    "list, bad namespace": (["list", "--namespace", "a_b"], r"--namespace 'a_b' is not a Kubernetes namespace"),
    "list, token file a folder": (["list", "--token-file", "/"], r"cannot read --token-file '/' \(Is a directory\)"),
    "unknown action": (["pause", "abc"], r"argument schedules_command: invalid choice: 'pause'"),
}


@pytest.mark.parametrize("args, message", SCHEDULES_CASES.values(), ids=SCHEDULES_CASES.keys())
def test_bad_input_to_schedules_fails_in_one_line_and_sends_nothing(
    bakeoff, fake: FakeKfpApi, args: list[str], message: str
) -> None:
    assert_one_line(bakeoff("schedules", *args, "--host", fake.url), message)
    assert fake.calls == []


SCHEDULE_FLAGS = {
    "every negative": (["--every=-5m"], r"--every '-5m' is not an interval"),
    "every zero": (["--every", "0s"], r"--every '0s' is not an interval"),
    "every unknown unit": (["--every", "5y"], r"--every '5y' is not an interval"),
    "every huge": (["--every", "99999999999999999999d"], r"--every '99999999999999999999d' is longer than a year"),
    "cron unicode": (["--cron", "ü"], r"--cron 'ü' has 1 fields"),
    "cron out of range": (["--cron", "0 0 25 * * *"], r"--cron '0 0 25 \* \* \*'"),
    "start not a time": (["--every", "1d", "--start", "tomorrow"], r"--start 'tomorrow' is not an ISO 8601 time"),
    "concurrency huge": (
        ["--every", "1d", "--max-concurrency", "100000000000000000000"],
        r"--max-concurrency 100000000000000000000 is outside 1-10",
    ),
    "concurrency a word": (
        ["--every", "1d", "--max-concurrency", "all"],
        r"argument --max-concurrency: invalid int value: 'all'",
    ),
}


@pytest.mark.parametrize("flags, message", SCHEDULE_FLAGS.values(), ids=SCHEDULE_FLAGS.keys())
def test_a_bad_schedule_fails_in_one_line_and_sends_nothing(
    bakeoff, fake: FakeKfpApi, flags: list[str], message: str
) -> None:
    assert_one_line(bakeoff("schedule", "--host", fake.url, *flags), message)
    assert fake.calls == []


def test_an_unknown_command_is_argparses_one_line(bakeoff) -> None:
    assert_one_line(bakeoff("train"), r"bakeoff: error: argument command: invalid choice: 'train'")
    assert_one_line(bakeoff("models", "delete"), r"argument models_command: invalid choice: 'delete'")
