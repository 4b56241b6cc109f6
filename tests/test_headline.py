"""benchmarks/results.md's headline: every figure's last value on each machine class, stamped, against the goals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import headline
from benchmarks.harness import Context, Figure, machine_class
from benchmarks.run import FIGURES, cpu, main, write_results

pytestmark = pytest.mark.unit

XEON = "Intel Xeon, AMX"
EPYC = "AMD EPYC, AVX-512 + bf16"


def machine(date: str, klass: str = EPYC, commit: str = "abc1234") -> dict:
    return {
        "cores": 2,
        "cpu": "AMD EPYC" if klass == EPYC else "Intel(R) Xeon(R) Processor",
        "avx512f": True,
        "amx": klass == XEON,
        "class": klass,
        "python": "3.11.7",
        "versions": {"tensorflow": "2.21.0"},
        "date": date,
        "commit": commit,
    }


def rows(text: str) -> dict[str, list[str]]:
    """The main table's rows by figure key: the cells after the key (the other classes' section left out)."""
    found = {}
    for line in text.split("## Other machine classes")[0].splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            found[cells[0].strip("`")] = cells[1:]
    return found


def others(text: str) -> list[list[str]]:
    """The rows of the other classes' section, each whole."""
    _, _, section = text.partition("## Other machine classes")
    return [
        [cell.strip() for cell in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| `")
    ]


def bench(folder: Path, figures: list[Figure], info: dict, ran: list[str]) -> str:
    write_results(figures, Context(folder, 1), info, ran, 90.0, folder=folder)
    return (folder / "results.md").read_text()


@pytest.fixture
def two_runs(tmp_path: Path) -> str:
    """`--only ingest` on 2026-12-01, then `--only mwms` on 2026-12-06, both on the AMD EPYC class."""
    bench(
        tmp_path,
        [Figure("ingest_ratio", 1.62, "×", detail="decode ÷ IDX")],
        machine("2026-12-01T05:00:00+00:00", commit="1111111"),
        ["ingest"],
    )
    figures = [
        Figure("mwms_efficiency_2w", 1.37, "×", detail="2 workers ÷ plain"),
        Figure("mwms_efficiency_2w_vs_tuned_plain", 0.9406, "×", detail="strict"),
        Figure("mwms_efficiency_1w", 1.488, "×", detail="1 worker ÷ plain"),
    ]
    return bench(tmp_path, figures, machine("2026-12-06T01:00:00+00:00", commit="2222222"), ["mwms"])


def test_a_figure_from_an_earlier_run_survives_a_later_partial_run_with_its_date_and_commit(two_runs: str) -> None:
    table = rows(two_runs)
    assert table["ingest_ratio"] == ["1.62 ×", "≤ 2", "yes", "2026-12-01, 1111111", "decode ÷ IDX"]
    assert table["mwms_efficiency_2w"][3] == "**this run**", "what this run measured says so"


def test_each_figure_shows_its_goal_and_whether_it_was_met(two_runs: str) -> None:
    table = rows(two_runs)
    assert table["mwms_efficiency_2w"][:3] == ["1.37 ×", "≥ 0.9", "yes"]
    assert table["mwms_efficiency_2w_vs_tuned_plain"][:3] == ["0.9406 ×", "≥ 0.97", "**no**"], "a miss says no"
    assert table["mwms_efficiency_1w"][:4] == ["1.488 ×", "", "", "**this run**"], "no goal, no verdict"


def test_a_count_an_entry_measures_as_an_int_is_shown_whole(tmp_path: Path) -> None:
    """The soak counts failed requests as an int: the run that measured it wrote its table (it once crashed there)."""
    figures = [Figure("soak_failed_requests", 0, "", detail="none"), Figure("soak_requests", 12117, "", detail="ok")]
    table = rows(bench(tmp_path, figures, machine("2026-12-07T19:00:00+00:00"), ["soak"]))
    assert table["soak_failed_requests"][:3] == ["0", "= 0", "yes"]
    assert table["soak_requests"][0] == "12,117"


def test_a_value_corrected_apart_from_the_run_shows_its_own_date_not_this_run(tmp_path: Path) -> None:
    """A figure the run measured wrongly, measured again apart and kept with its journal section, is not the run's."""
    bench(tmp_path, [Figure("ingest_ratio", 2.8, "×", detail="run")], machine("2026-12-07T19:00:00+00:00"), ["ingest"])
    figures = json.loads((tmp_path / FIGURES).read_text())
    corrected = {"value": 1.5, "date": "2026-12-07T20:00:00+00:00", "commit": "fixed12", "source": "journal"}
    figures["figures"][0] |= corrected
    (tmp_path / FIGURES).write_text(json.dumps(figures))
    assert main(["--rewrite-headline", "--results", str(tmp_path)]) == 0
    row = rows((tmp_path / "results.md").read_text())["ingest_ratio"]
    assert row[0] == "1.5 ×" and row[3] == "2026-12-07, fixed12", row


def test_a_figure_never_measured_says_so_and_every_goal_has_its_row(two_runs: str) -> None:
    table = rows(two_runs)
    assert table["plan_error"] == ["never measured", "0.85–1.05", "never measured", "", ""]
    assert list(table)[: len(headline.GOALS)] == [goal.key for goal in headline.GOALS]


def test_another_class_s_figure_is_marked_as_that_class_s_and_not_compared_with_this_run_s(tmp_path: Path) -> None:
    """The EPYC measures the 2-worker efficiency, a Xeon it and the plan's error later, then the EPYC ingest alone."""
    bench(
        tmp_path, [Figure("mwms_efficiency_2w", 1.37, "×")], machine("2026-12-05T01:00:00+00:00", commit="1111111"), []
    )
    xeon = [Figure("plan_error", 0.9945, "", detail="14.83 ÷ 14.9 min"), Figure("mwms_efficiency_2w", 0.5, "×")]
    bench(tmp_path, xeon, machine("2026-12-06T09:00:00+00:00", XEON, "3333333"), ["pipeline", "mwms"])
    text = bench(tmp_path, [Figure("ingest_ratio", 1.6, "×")], machine("2026-12-07T01:00:00+00:00"), ["ingest"])
    table = rows(text)
    # Only the Xeon measured plan_error: shown, marked as the Xeon's, its verdict the Xeon's.
    assert table["plan_error"][:4] == [
        "0.9945",
        "0.85–1.05",
        f"yes on {XEON}",
        f"2026-12-06, 3333333, **{XEON}** (another class)",
    ]
    # Both measured the 2-worker efficiency: the table shows this class's, although the Xeon's is newer; the Xeon's
    # is in its own section, with its own verdict.
    assert table["mwms_efficiency_2w"][:4] == ["1.37 ×", "≥ 0.9", "yes", "2026-12-05, 1111111"]
    assert others(text) == [
        [
            "`mwms_efficiency_2w`",
            "0.5 ×",
            "≥ 0.9",
            f"**no** on {XEON}",
            f"2026-12-06, 3333333, **{XEON}** (another class)",
            "",
        ]
    ]
    assert "0.5 ×" not in text.split("## Other machine classes")[0], "the Xeon's value is not in this class's table"


def test_figures_json_keeps_every_class_s_last_value_and_results_json_this_run_s_samples(tmp_path: Path) -> None:
    bench(tmp_path, [Figure("ingest_ratio", 1.9, "×")], machine("2026-12-01T00:00:00+00:00", XEON), ["ingest"])
    bench(tmp_path, [Figure("ingest_ratio", 1.7, "×")], machine("2026-12-02T00:00:00+00:00"), ["ingest"])
    context = Context(tmp_path, 1, samples={"ingest": [0.5, 0.6]})
    write_results(
        [Figure("ingest_ratio", 1.6, "×")], context, machine("2026-12-03T00:00:00+00:00"), ["ingest"], 9, tmp_path
    )
    kept = {(m.machine_class, m.value, m.date) for m in headline.load(tmp_path / FIGURES)}
    assert kept == {(XEON, 1.9, "2026-12-01T00:00:00+00:00"), (EPYC, 1.6, "2026-12-03T00:00:00+00:00")}
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["samples"] == {"ingest": [0.5, 0.6]} and document["entries"] == ["ingest"]
    assert [(f["key"], f["met"]) for f in document["figures"]] == [("ingest_ratio", True)]


def test_the_headline_names_the_run_its_machine_and_its_class(two_runs: str) -> None:
    assert "2026-12-06T01:00:00+00:00, 1.5 min, entries mwms, at 2222222." in two_runs
    assert f"AMD EPYC, 2 cores, avx512f yes, amx no; Python 3.11.7; tensorflow 2.21.0; class **{EPYC}**." in two_runs


def test_an_unreadable_figures_file_stops_the_bench_before_any_entry_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / FIGURES).write_text('{"figures": [{"key": "ingest_ratio"}]}')
    assert main(["--only", "ingest", "--results", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"benchmarks: {str(tmp_path / FIGURES)!r} is not a figures file (")
    assert error.rstrip().endswith("restore it with `git checkout figures.json`") and error.count("\n") == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == [FIGURES], "nothing run, nothing written"


@pytest.mark.parametrize(
    "model, flags, named",
    [
        ("AMD EPYC", "fpu avx2 avx512f avx512_bf16", "AMD EPYC, AVX-512 + bf16"),
        ("AMD EPYC 7B13 64-Core Processor", "fpu avx2", "AMD EPYC, AVX2"),
        ("Intel(R) Xeon(R) Processor", "avx2 avx512f avx512_bf16 amx_tile amx_bf16", "Intel Xeon, AMX"),
        ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "avx2 avx512f", "Intel Xeon, AVX-512"),
        ("", "sse2", "unknown, no AVX2"),
    ],
)
def test_the_machine_class_is_the_cpu_s_family_and_its_widest_instructions(model: str, flags: str, named: str) -> None:
    assert machine_class(model, flags.split()) == named


def test_this_machine_s_class_is_named_from_lscpu() -> None:
    found = cpu()
    assert found["class"] == machine_class(found["cpu"], Path("/proc/cpuinfo").read_text().split())
    assert found["avx512f"] == ("avx512f" in Path("/proc/cpuinfo").read_text().split())


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


def test_the_committed_headline_is_the_one_its_figures_write(tmp_path: Path) -> None:
    """benchmarks/results.md is what figures.json and results.json render: no hand edit drifts from them."""
    here = Path(__file__).resolve().parents[1] / "benchmarks"
    for name in ("results.json", FIGURES):
        (tmp_path / name).write_text((here / name).read_text())
    assert main(["--rewrite-headline", "--results", str(tmp_path)]) == 0
    assert (tmp_path / "results.md").read_text() == (here / "results.md").read_text(), (
        "benchmarks/results.md differs from what its figures write: `python -m benchmarks.run --rewrite-headline`"
    )
