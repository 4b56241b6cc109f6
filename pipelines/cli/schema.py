"""`bakeoff schema`: the config file's JSON Schema, for editors to check a variants file as it is typed."""

from __future__ import annotations

import argparse
import sys

from bakeoff.components import config_schema


def cmd_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(config_schema.text())
    return 0


def add_schema_commands(commands: argparse._SubParsersAction) -> None:
    """Registers schema."""
    schema = commands.add_parser(
        "schema",
        help="print the config file's JSON Schema (pipelines/variants.schema.json holds it), for editors",
    )
    schema.set_defaults(handler=cmd_schema)
