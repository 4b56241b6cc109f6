"""The built-in searches: the one that fits the data's shape and size, and that each parses and fits its images."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.components import defaults
from bakeoff.components.search import builtin
from bakeoff.components.search.costs import FASHION_MNIST, Images, macs
from bakeoff.components.spec import check_fits, load_config
from bakeoff.pipelines.cli.main import main
from tests import samples

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("images", "chosen", "why"),
    [
        (FASHION_MNIST, defaults.CONFIG, "Fashion-MNIST (28x28x1, 10 classes, 55000 training images): its own tuned"),
        (Images(1500, (28, 28, 1), 10), builtin.SMALL, "small grayscale images (28x28x1, 10 classes, 1500"),
        (Images(900, (63, 40, 1), 4), builtin.SMALL, "small grayscale images"),
        (Images(900, (64, 64, 1), 4), builtin.LARGE, "64 pixels a side and up (64x64x1"),
        (Images(4800, (32, 32, 3), 6), builtin.LARGE, "colour (32x32x3, 6 classes, 4800 training images)"),
        (Images(937, (224, 224, 3), 4), builtin.LARGE, "colour (224x224x3"),
    ],
)
def test_the_search_is_chosen_by_the_images_shape_and_says_why(images: Images, chosen: object, why: str) -> None:
    picked = builtin.builtin_search(images)
    assert picked.path == chosen
    assert picked.reason.startswith(why)


@pytest.mark.parametrize("path", [builtin.SMALL, builtin.LARGE])
def test_each_built_in_search_parses_and_its_networks_fit_the_images_it_is_chosen_for(path: object) -> None:
    assert isinstance(path, type(builtin.SMALL))
    config = load_config(path)
    shape = (28, 28, 1) if path == builtin.SMALL else (64, 64, 3)
    check_fits(config.variants, shape, str(path))
    families = {variant.architecture for variant in config.variants}
    assert "resnet" in families and ("backbone" in families) == (path == builtin.LARGE)
    assert config.budget_minutes == 15


def test_the_small_search_s_narrowest_resnet_costs_less_than_its_wide_cnns_at_28_pixels() -> None:
    """A strided stem makes a residual network cheaper than the wide CNN it must beat in the same 15 minutes."""
    config = load_config(builtin.SMALL)
    cost = {variant.name: macs(variant) for variant in config.variants}
    resnet = min(value for name, value in cost.items() if name.startswith("resnet"))
    assert all(resnet < cost[name] for name in cost if name.startswith("wide_top"))


def _artifact(folder: Path, shape: tuple[int, int, int], examples: int = 1000) -> Path:
    """An ingested artifact's metadata.json alone: what plan reads of the data."""
    from bakeoff.components.storage.records import DatasetMetadata, Preprocessing, SkippedFiles

    folder.mkdir()
    metadata = DatasetMetadata(
        {"train": examples, "validation": 100, "test": 100}, 2, list(shape), list("abcd"), "f", "folder",
        Preprocessing(*shape, "bilinear"), {}, SkippedFiles(0, []), {},
    )  # fmt: skip
    (folder / "metadata.json").write_text(metadata.to_json())
    return folder


def test_plan_without_a_config_plans_the_search_that_fits_the_data_and_says_why(
    tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture
) -> None:
    """`bakeoff run` without --config trains the built-in search that fits the data: the plan prices that one."""
    data = _artifact(tmp_path / "gray", (32, 32, 1))
    images = Images(1000, (32, 32, 1), 4)
    samples.cache_calibration(cost_cache, load_config(builtin.SMALL), images=images)
    assert main(["plan", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "search: search_small.yaml, built in for small grayscale images (32x32x1, 4 classes, 1000 training"
        " images): CNNs and residual networks from scratch (`bakeoff plan --write-search FILE` copies it to edit;"
        f" --config FILE trains another)\n{len(load_config(builtin.SMALL).variants)} variants from {builtin.SMALL}:\n"
    )


@pytest.fixture
def offline_rgb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An RGB artifact of 64x64 on a machine with no ImageNet weights in ~/.keras and no way to download them: a
    proxy on a closed port."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    return _artifact(tmp_path / "rgb", (64, 64, 3))


@pytest.mark.long_running
def test_offline_the_built_in_search_goes_on_without_its_backbones_and_says_so(
    offline_rgb: Path, tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture
) -> None:
    config = load_config(builtin.LARGE)
    samples.cache_calibration(cost_cache, config, images=Images(1000, (64, 64, 3), 4))
    assert main(["plan", "--data", str(offline_rgb)]) == 0
    out = capsys.readouterr().out
    said, left_out, listed = out.splitlines()[:3]
    assert said.startswith("search: search_large.yaml, built in for colour (64x64x3, 4 classes, 1000 training")
    backbones = [v.name for v in config.variants if v.architecture == "backbone"]
    assert backbones and left_out.startswith(
        f"search: {', '.join(backbones)} left out: pretrained weights cannot be had here (URL fetch failure on https:"
    )
    kept = len(config.variants) - len(backbones)
    assert listed == f"{kept} variants from {builtin.LARGE}:"
    assert not any(name in out.split(listed)[1] for name in backbones)


@pytest.mark.long_running
def test_offline_a_config_that_names_imagenet_weights_is_refused_in_one_line_before_any_measuring(
    offline_rgb: Path, tmp_path: Path, cost_cache: Path, capsys: pytest.CaptureFixture
) -> None:
    written = tmp_path / "mine.yaml"
    written.write_text(
        "variants:\n  - name: mobile\n    model: {type: backbone, network: MobileNetV3Small, weights: imagenet}\n"
        "search: {budget: {minutes: 5}}\n"
    )
    assert main(["plan", "--config", str(written), "--data", str(offline_rgb)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"bakeoff: error: {written}: variant 'mobile': its pretrained weights cannot be had here (URL fetch failure"
    )
    assert captured.err.endswith("set model.weights to none or a weights file (docs/models.md)\n")
    assert captured.err.count("\n") == 1
    assert not (cost_cache / "calibration.json").exists() and not list(cost_cache.iterdir())  # nothing measured


def test_write_search_copies_the_search_that_fits_the_data_and_never_over_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = _artifact(tmp_path / "rgb", (96, 96, 3))
    out = tmp_path / "mine.yaml"
    assert main(["plan", "--data", str(data), "--write-search", str(out)]) == 0
    assert out.read_text() == builtin.LARGE.read_text()
    assert capsys.readouterr().out == f"wrote search_large.yaml to {out}: edit it, then pass it to --config\n"
    out.write_text("mine")
    assert main(["plan", "--data", str(data), "--write-search", str(out)]) == 1
    assert capsys.readouterr().err == (
        f"bakeoff: error: --write-search {str(out)!r} exists: name a new file, or remove it first\n"
    )
    assert out.read_text() == "mine"
