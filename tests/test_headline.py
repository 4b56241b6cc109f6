"""benchmarks/results.md's headline: one run's figures against the goals in code, and nothing older."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import headline
from benchmarks.harness import Context, Figure
from benchmarks.run import cpu, write_results

pytestmark = pytest.mark.unit

MACHINE = {
    "cores": 2,
    "cpu": "Intel(R) Xeon(R) Processor",
    "avx512f": True,
    "amx": False,
    "python": "3.11.7",
    "versions": {"tensorflow": "2.21.0"},
    "date": "2026-12-06T01:00:00+00:00",
}


def rows(text: str) -> dict[str, list[str]]:
    """The table's rows by figure key: the cells after the key."""
    found = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            found[cells[0].strip("`")] = cells[1:]
    return found


@pytest.fixture
def written(tmp_path: Path) -> tuple[str, dict]:
    """A run of `--only mwms` with fake figures, over a results.md that an older run wrote."""
    (tmp_path / "results.md").write_text("# bakeoff benchmarks\n\n| `ingest_ratio` | 1.62 × | ≤ 2 | yes | old |\n")
    context = Context(tmp_path, 1, samples={"mwms_examples_per_second": {"2w": [3000.0, 3100.0]}})
    figures = [
        Figure("mwms_efficiency_2w", 1.37, "×", detail="2 workers ÷ plain"),
        Figure("mwms_efficiency_2w_vs_tuned_plain", 0.9406, "×", detail="strict"),
        Figure("mwms_efficiency_1w", 1.488, "×", detail="1 worker ÷ plain"),
    ]
    write_results(figures, context, MACHINE, ["mwms"], 90.0, folder=tmp_path)
    return (tmp_path / "results.md").read_text(), json.loads((tmp_path / "results.json").read_text())


def test_each_figure_shows_its_goal_and_whether_it_was_met(written: tuple[str, dict]) -> None:
    table = rows(written[0])
    assert table["mwms_efficiency_2w"][:3] == ["1.37 ×", "≥ 0.9", "yes"]
    assert table["mwms_efficiency_2w_vs_tuned_plain"][:3] == ["0.9406 ×", "≥ 0.97", "**no**"], "a miss says no"
    assert table["mwms_efficiency_1w"][:3] == ["1.488 ×", "", ""], "a figure without a goal has no verdict"


def test_a_figure_the_run_did_not_measure_says_not_run_and_never_an_older_value(written: tuple[str, dict]) -> None:
    text, _ = written
    table = rows(text)
    assert table["ingest_ratio"][:3] == ["not run", "≤ 2", "not run"]
    assert "1.62" not in text and "old" not in text
    assert list(table)[: len(headline.GOALS)] == [goal.key for goal in headline.GOALS], "every goal has its row"
    for goal in headline.GOALS:
        if not goal.key.startswith("mwms_efficiency_2w"):
            assert table[goal.key][0] == "not run", goal.key


def test_the_headline_names_the_date_the_machine_and_the_entries_run(written: tuple[str, dict]) -> None:
    text, _ = written
    assert "2026-12-06T01:00:00+00:00, 1.5 min, entries mwms." in text
    assert "Intel(R) Xeon(R) Processor, 2 cores, avx512f yes, amx no;" in text


def test_results_json_holds_the_raw_samples_and_verdicts_of_that_run(written: tuple[str, dict]) -> None:
    _, document = written
    assert document["samples"] == {"mwms_examples_per_second": {"2w": [3000.0, 3100.0]}}
    assert [(f["key"], f["met"]) for f in document["figures"]] == [
        ("mwms_efficiency_2w", True),
        ("mwms_efficiency_2w_vs_tuned_plain", False),
        ("mwms_efficiency_1w", None),
    ]
    assert document["entries"] == ["mwms"]


@pytest.mark.parametrize(
    "key, value, met",
    [
        ("plan_error", 0.84, False),
        ("plan_error", 0.95, True),
        ("plan_error", 1.06, False),
        ("soak_failed_requests", 0, True),
        ("soak_failed_requests", 1, False),
        ("soak_rss_growth", 0.05, False),
        ("soak_rss_growth", 0.049, True),
        ("search_halving_gap", -0.003, True),
        ("search_halving_gap", -0.0031, False),
        ("search_seeds", 2, False),
        ("peers_bakeoff_margin", -0.001, False),
        ("peers_bakeoff_margin", 0.0, True),
    ],
)
def test_the_goals_hold_at_their_bounds(key: str, value: float, met: bool) -> None:
    assert headline.met(Figure(key, value, "")) is met


def test_the_cpu_is_named_with_its_avx512_and_amx_flags() -> None:
    found = cpu()
    assert found["cpu"] and isinstance(found["avx512f"], bool) and isinstance(found["amx"], bool)
    flags = Path("/proc/cpuinfo").read_text().split()
    assert found["avx512f"] == ("avx512f" in flags)
