"""Compiling the pipeline to KFP IR YAML for a cluster (the file the UI's "Upload pipeline" takes)."""

from __future__ import annotations

import ast
import logging
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bakeoff.components import defaults
from bakeoff.components.errors import BakeoffError
from bakeoff.components.spec import Config, load_config
from bakeoff.pipelines import conformance
from bakeoff.pipelines.pipeline import Cluster, build_pipeline

if TYPE_CHECKING:
    from bakeoff.components.search.budget import Plan

logger = logging.getLogger(__name__)

COMPILED = Path(__file__).resolve().parent / "bakeoff.yaml"
HEADER_DEFAULT = re.compile(r"(#    \w+: \w+ \[Default: )(.*)\]")  # an input's line in kfp's header comment


def compile_pipeline(
    output: Path,
    config: Path = defaults.CONFIG,
    image: str = defaults.IMAGE,
    parallelism: int = defaults.CLUSTER_PARALLELISM,
    cluster: Cluster = Cluster(),
    budget: float | None = None,
) -> Path:
    """Writes the IR YAML of the pipeline built for ``cluster``; the config's variants, halving settings, source and
    image size become the defaults of its run-time parameters.

    The pipeline holds ``MAX_RUNGS`` rungs whatever the config, so a run may list any number of variants and any
    halving settings (``build_pipeline``). The file appears only once every supported KFP backend would accept it.
    The config's ``search.budget`` is for runs on this machine: a cluster's nodes are not this
    machine, and run jobs side by side, so the pipeline trains the search as
    written unless ``budget`` (minutes, ``--budget``) asks to plan it on this machine's costs.
    """
    from kfp import compiler

    loaded = planned(load_config(config).with_budget(math.inf if budget is None else budget))
    variants = [variant.to_dict() for variant in loaded.variants]
    pipeline = build_pipeline(
        parallelism=parallelism, variants=variants, image=image, cluster=cluster, search=loaded.search, data=loaded.data
    )
    partial = output.with_name(f".{output.stem}.partial.yaml")
    try:
        compiler.Compiler().compile(pipeline, str(partial))
        text = stable_header(partial.read_text())
        partial.write_text(text)
        check_backends(text)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    return output


def stable_header(ir_yaml: str) -> str:
    """``ir_yaml`` with its header comment's dict defaults in sorted key order.

    kfp writes them in its protobuf runtime's map order (``pipeline_spec_builder``'s header of the inputs), which
    changes from one process to the next: each compile of the same pipeline rewrote the committed file.
    """
    lines = ir_yaml.split("\n")
    for index, line in enumerate(lines):
        if not line.startswith("#"):
            break
        default = HEADER_DEFAULT.fullmatch(line)
        if default and default[2][:1] in "[{":
            lines[index] = f"{default[1]}{_sorted(ast.literal_eval(default[2]))}]"
    return "\n".join(lines)


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def planned(config: Config, max_train_examples: int = 0) -> Config:
    """The config as a run trains it: a search budget fits it here, before anything runs (``budget_plan``)."""
    plan = budget_plan(config, max_train_examples)
    return plan.config if plan else config


def budget_plan(config: Config, max_train_examples: int = 0) -> Plan | None:
    """The plan a search budget makes of ``config`` (None without a budget), what ``bakeoff plan`` shows.

    Each change is said on stderr. Compiling plans for the whole training split,
    the default of the compiled pipeline's ``max_train_examples``. Only a budget needs this machine's costs.
    """
    from bakeoff.components.search.budget import plan_config

    if config.budget_minutes is None:
        return None
    plan, _ = plan_config(config, max_train_examples)
    for line in plan.fitted:
        logger.info("bakeoff: within search.budget: %s", line)
    return plan


def read_ir(ir_yaml: str) -> dict:
    """The PipelineSpec document of compiled YAML (the first document; the second is the platform spec)."""
    # libyaml's loader where PyYAML has it: the pure-Python one takes about a second per read of bakeoff's IR
    return next(yaml.load_all(ir_yaml, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def check_backends(ir_yaml: str) -> None:
    """Refuses IR that a supported KFP backend's driver would reject, naming the first problem."""
    spec = read_ir(ir_yaml)
    for version in conformance.SUPPORTED:
        found = conformance.violations(spec, conformance.BACKENDS[version])
        if found:
            raise BakeoffError(
                f"the compiled pipeline would fail on KFP {version} ({found[0]}): fix the pipeline or the config"
            )
