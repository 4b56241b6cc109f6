"""Recurring runs of the compiled pipeline: created, listed, enabled, disabled and deleted."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.components.errors import BakeoffError
from bakeoff.pipelines.kfp_client.connection import Api
from bakeoff.pipelines.kfp_client.packages import read_package
from bakeoff.pipelines.kfp_client.parameters import check_inputs
from bakeoff.pipelines.kfp_client.runs import experiment_id
from bakeoff.pipelines.kfp_client.triggers import Trigger

if TYPE_CHECKING:
    import kfp_server_api

MAX_CONCURRENCY = 10  # the API server rejects more (RecurringRun.max_concurrency: range [1-10])
SCHEDULE_ACTIONS = {  # action → kfp.Client method, past tense for the report line
    "enable": ("enable_recurring_run", "enabled"),
    "disable": ("disable_recurring_run", "disabled"),
    "delete": ("delete_recurring_run", "deleted"),
}


def check_max_concurrency(value: int) -> int:
    if not 1 <= value <= MAX_CONCURRENCY:
        raise BakeoffError(
            f"--max-concurrency {value} is outside 1-{MAX_CONCURRENCY}, the range KFP accepts: choose one within it"
        )
    return value


@dataclasses.dataclass(frozen=True)
class Scheduled:
    """The recurring run that schedule created and where the UI shows it."""

    recurring_run_id: str
    name: str
    url: str


def schedule(
    api: Api,
    package: Path,
    experiment: str,
    trigger: Trigger,
    params: Mapping[str, Any],
    name: str,
    max_concurrency: int = 1,
    no_catchup: bool = False,
) -> Scheduled:
    """A recurring run of the compiled package, enabled from the start."""
    check_inputs(read_package(package), params)
    created = api.call(
        "create the recurring run",
        api.client.create_recurring_run,
        experiment_id=experiment_id(api, experiment),
        job_name=name,
        start_time=trigger.start,
        end_time=trigger.end,
        interval_second=trigger.interval_seconds,
        cron_expression=trigger.cron,
        max_concurrency=max_concurrency,
        no_catchup=no_catchup,
        params=dict(params),
        pipeline_package_path=str(package),
        enabled=True,
    )
    return Scheduled(created.recurring_run_id, name, f"{api.host}/#/recurringrun/details/{created.recurring_run_id}")


def list_schedules(api: Api) -> list[kfp_server_api.V2beta1RecurringRun]:
    """Every recurring run in our namespace (all pages), newest first."""
    found: list[kfp_server_api.V2beta1RecurringRun] = []
    token = ""
    while True:
        page = api.call(
            "list recurring runs",
            api.client.list_recurring_runs,
            page_token=token,
            page_size=100,
            sort_by="created_at desc",
            namespace=api.namespace,
        )
        found.extend(page.recurring_runs or [])
        token = page.next_page_token or ""
        if not token:
            return found


def change_schedule(api: Api, action: str, recurring_run_id: str) -> str:
    """enable, disable or delete one recurring run; returns the past tense for the report line."""
    method, done = SCHEDULE_ACTIONS[action]
    api.call(
        f"{action} recurring run {recurring_run_id!r}",
        getattr(api.client, method),
        recurring_run_id,
        not_found=f"no recurring run {recurring_run_id!r} on {api.host}: `bakeoff schedules list` shows the ids",
    )
    return done
