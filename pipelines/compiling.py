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
from bakeoff.pipelines.pipeline import Cluster, Resources, build_pipeline

if TYPE_CHECKING:
    from bakeoff.components.search.budget import Plan
    from bakeoff.components.search.costs import Images

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
    resources: Resources | None = None,
) -> Path:
    """Writes the IR YAML of the pipeline built for ``cluster``; the config's variants, halving settings, source and
    image size become the defaults of its run-time parameters.

    The pipeline holds ``MAX_RUNGS`` rungs whatever the config, so a run may list any number of variants and any
    halving settings (``build_pipeline``). The file appears only once every supported KFP backend would accept it.
    The config's ``search.budget`` is for runs on this machine: a cluster's nodes are not this
    machine, and run jobs side by side, so the pipeline trains the search as
    written unless ``budget`` (minutes, ``--budget``) asks to plan it on this machine's costs. ``resources``: each
    step's CPU and memory requests and limits.
    """
    from kfp import compiler

    loaded = load_config(config).with_budget(math.inf if budget is None else budget)
    loaded = planned(loaded, images=compiled_images(loaded) if loaded.budget_minutes is not None else None, here=False)
    variants = [variant.to_dict() for variant in loaded.variants]
    pipeline = build_pipeline(
        parallelism=parallelism,
        variants=variants,
        image=image,
        cluster=cluster,
        search=loaded.search,
        data=loaded.data,
        resources=resources,
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


def planned(config: Config, max_train_examples: int = 0, images: Images | None = None, here: bool = True) -> Config:
    """The config as a run trains it: a search budget fits it here, before anything runs (``budget_plan``), for a
    run on this machine (``here``) or on a cluster's nodes."""
    plan = budget_plan(config, max_train_examples, images, here)
    return plan.config if plan else config


def source_images(config: Config) -> Images:
    """What a plan prices of ``config``'s source: its listing and first image (``inspection.inspect``); one line for
    a source that cannot be listed here."""
    from bakeoff.components.data.inspection import inspect
    from bakeoff.components.search.costs import Images

    return Images.of_source(inspect(config.data.source, config.data.image_size))


def compiled_images(config: Config) -> Images:
    """What compiling with a budget prices: the source's images where it can be listed here; else, said in a line,
    Fashion-MNIST's (a cluster's source may be readable only from the cluster)."""
    from bakeoff.components.search.costs import FASHION_MNIST

    try:
        return source_images(config)
    except BakeoffError as error:
        logger.warning(
            "bakeoff: the budget prices Fashion-MNIST's %s training examples, not %s, which cannot be listed here: %s",
            f"{FASHION_MNIST.examples:,}",
            config.data.source,
            error,
        )
        return FASHION_MNIST


def budget_plan(
    config: Config,
    max_train_examples: int = 0,
    images: Images | None = None,
    here: bool = True,
    started: float | None = None,
) -> Plan | None:
    """The plan a search budget makes of ``config`` on ``images`` (None: its source's, listed here), what
    ``bakeoff plan`` shows; None without a budget. A run's budget counts from ``started`` (``time.monotonic()``),
    the measuring of this machine's costs included.

    Each change is said on stderr. Compiling plans for the whole training split,
    the default of the compiled pipeline's ``max_train_examples``. Only a budget needs this machine's costs.
    """
    from bakeoff.components.search.budget import plan_config

    if config.budget_minutes is None:
        return None
    # A cluster's CPUs are not this one's: its replicas resolve `auto` themselves.
    flags: frozenset[str] | None = None if here else frozenset()
    plan, _ = plan_config(config, max_train_examples, images or source_images(config), flags, started)
    for line in plan.fitted:
        logger.info("bakeoff: within search.budget: %s", line)
    for line in plan.precisions:
        logger.info("bakeoff: %s", line)
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
