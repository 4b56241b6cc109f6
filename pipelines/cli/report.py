"""`bakeoff report`: one run's page (leaderboard, curves, confusion matrix, mistakes) from the store, as HTML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bakeoff.components import defaults
from bakeoff.pipelines.cli.flags import open_cli_store, store_location_args

LATEST = "latest"


def cmd_report(args: argparse.Namespace) -> int:
    from bakeoff.components.reporting.report import latest_run, write_report

    store = open_cli_store(args)
    run_id = latest_run(store) if args.run_id == LATEST else args.run_id
    path = write_report(store, run_id, args.output)
    print(f"wrote the report of run {run_id} to {path}", file=sys.stderr)
    return 0


def add_report_commands(commands: argparse._SubParsersAction) -> None:
    """Registers report."""
    report = commands.add_parser(
        "report", help="write one run's report page: leaderboard, curves, confusion matrix, mistakes"
    )
    report.add_argument(
        "run_id",
        nargs="?",
        default=LATEST,
        metavar="RUN_ID",
        help=f"the run to report, or '{LATEST}' for the newest run that reached select (default {LATEST})",
    )
    store_location_args(report)
    report.add_argument(
        "-o",
        "--output",
        type=Path,
        default=defaults.REPORT,
        help=f"where to write the page (default {defaults.REPORT})",
    )
    report.set_defaults(handler=cmd_report)
