"""The ``bakeoff`` command: its parser, and one error line instead of a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bakeoff.components import logs
from bakeoff.components.errors import ERROR_PREFIX, BakeoffError
from bakeoff.components.tfenv import quiet_tensorflow
from bakeoff.pipelines.cli.cluster import add_cluster_commands
from bakeoff.pipelines.cli.deploy import add_deploy_commands
from bakeoff.pipelines.cli.local import add_local_commands
from bakeoff.pipelines.cli.plan import add_plan_commands
from bakeoff.pipelines.cli.report import add_report_commands
from bakeoff.pipelines.cli.schema import add_schema_commands
from bakeoff.pipelines.cli.serving import add_serving_commands


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="bakeoff", description="A Kubeflow Pipelines bake-off of CNN variants trained as multi-worker TFJobs."
    )
    top.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = top.add_subparsers(dest="command", required=True)
    add_local_commands(commands)
    add_plan_commands(commands)
    add_cluster_commands(commands)
    add_serving_commands(commands)
    add_deploy_commands(commands)
    add_report_commands(commands)
    add_schema_commands(commands)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logs.configure()  # the components' lines in this process; the steps, replicas and server it starts configure theirs
    quiet_tensorflow(log_level=not args.debug)  # inherited by the steps and their replicas
    try:
        return args.handler(args)
    except BakeoffError as error:
        if args.debug:
            raise
        print(f"{ERROR_PREFIX} {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bakeoff: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
