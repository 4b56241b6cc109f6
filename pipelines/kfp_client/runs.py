"""Runs of the compiled pipeline: the experiment they belong to, one run submitted, and following it to its end."""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.pipelines.kfp_client.connection import Api
from bakeoff.pipelines.kfp_client.packages import read_package
from bakeoff.pipelines.kfp_client.parameters import check_inputs

if TYPE_CHECKING:
    import kfp_server_api

POLL_SECONDS = 5.0
FINAL_STATES = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")


def experiment_id(api: Api, name: str) -> str:
    """The experiment's id, creating it on first use (kfp's create_experiment gets before it creates)."""
    experiment = api.call(
        f"get or create experiment {name!r}", api.client.create_experiment, name, namespace=api.namespace
    )
    return experiment.experiment_id


def default_run_name(prefix: str = "bakeoff") -> str:
    return f"{prefix} {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S}"


@dataclasses.dataclass(frozen=True)
class Submitted:
    """The run that submit created and where the UI shows it."""

    run_id: str
    name: str
    url: str


def submit(api: Api, package: Path, experiment: str, params: Mapping[str, Any], run_name: str) -> Submitted:
    """One run of the compiled package (its spec travels inline, no upload needed) in ``experiment``."""
    check_inputs(read_package(package), params)
    run = api.call(
        "create the run",
        api.client.run_pipeline,
        experiment_id=experiment_id(api, experiment),
        job_name=run_name,
        pipeline_package_path=str(package),
        params=dict(params),
    )
    return Submitted(run.run_id, run_name, api.run_url(run.run_id))


def wait_for_run(
    api: Api, run_id: str, report: Callable[[str], None] = lambda state: None
) -> kfp_server_api.V2beta1Run:
    """Polls the run until it ends and reports each new state.

    Not kfp.Client.wait_for_run_completion: that one never returns for a
    CANCELED run (its finish states are succeeded/failed/skipped/error).
    """
    last = None
    while True:
        run = api.call(f"follow run {run_id}", api.client.get_run, run_id)
        state = run.state or "RUNTIME_STATE_UNSPECIFIED"
        if state != last:
            report(state)
            last = state
        if state in FINAL_STATES:
            return run
        time.sleep(POLL_SECONDS)
