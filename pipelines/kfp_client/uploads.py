"""Uploading the compiled pipeline: a new pipeline, or a new version of the one already of that name."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.components.errors import BakeoffError
from bakeoff.pipelines.kfp_client.connection import Api

if TYPE_CHECKING:
    import kfp_server_api


def _equals(key: str, value: str) -> str:
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": key, "string_value": value}]})


def _pipeline_id(api: Api, name: str) -> str | None:
    """The id of the pipeline called ``name`` in our namespace (or the shared ones), if there is one."""
    listing = api.call(
        f"look up pipeline {name!r}",
        api.client.list_pipelines,
        filter=_equals("display_name", name),
        namespace=api.namespace,
        page_size=10,
    )
    matches = [p for p in listing.pipelines or [] if name in (p.display_name, p.name)]
    if len(matches) > 1:
        raise BakeoffError(f"{len(matches)} pipelines are named {name!r} on {api.host}: pass --name of a unique one")
    return matches[0].pipeline_id if matches else None


def _versions(api: Api, pipeline_id: str) -> list[kfp_server_api.V2beta1PipelineVersion]:
    versions: list[kfp_server_api.V2beta1PipelineVersion] = []
    token = ""
    while True:
        page = api.call(
            "list the pipeline's versions",
            api.client.list_pipeline_versions,
            pipeline_id,
            page_token=token,
            page_size=100,
            sort_by="created_at desc",
        )
        versions.extend(page.pipeline_versions or [])
        token = page.next_page_token or ""
        if not token:
            return versions


def default_version_name(package: Path) -> str:
    """UTC time (sortable) plus the package's hash (same content, same suffix), unique within a pipeline."""
    digest = hashlib.sha256(package.read_bytes()).hexdigest()[:8]
    return f"{datetime.datetime.now(datetime.UTC):%Y%m%d-%H%M%S}-{digest}"


@dataclasses.dataclass(frozen=True)
class Uploaded:
    """What upload made, for the report line and the UI link."""

    pipeline_id: str
    pipeline_name: str
    version_id: str
    version_name: str
    new_pipeline: bool
    url: str


def upload(api: Api, package: Path, name: str, version: str | None = None) -> Uploaded:
    """A new pipeline, or a new version of the one already called ``name``.

    A new pipeline uploaded whole gets its first version named after it (KFP's
    rule); when --version names it, the pipeline is created first and the
    package added as that version.
    """
    import kfp_server_api

    pipeline_id = _pipeline_id(api, name)
    if pipeline_id is None and version is None:
        pipeline = api.call(
            f"upload pipeline {name!r}",
            api.client.upload_pipeline,
            str(package),
            pipeline_name=name,
            namespace=api.namespace,
        )
        first = _versions(api, pipeline.pipeline_id)[0]
        return Uploaded(
            pipeline.pipeline_id,
            name,
            first.pipeline_version_id,
            first.display_name or first.name,
            True,
            f"{api.host}/#/pipelines/details/{pipeline.pipeline_id}/version/{first.pipeline_version_id}",
        )
    version = version or default_version_name(package)
    if pipeline_id is not None and any(version in (v.display_name, v.name) for v in _versions(api, pipeline_id)):
        raise BakeoffError(
            f"pipeline {name!r} already has a version {version!r}: choose another --version, "
            "or leave it out for a new name"
        )
    new_pipeline = pipeline_id is None
    if new_pipeline:
        body = kfp_server_api.V2beta1Pipeline(name=name, display_name=name, namespace=api.namespace)
        pipeline_id = api.call(
            f"create pipeline {name!r}", api.client.pipelines.pipeline_service_create_pipeline, body
        ).pipeline_id
    assert pipeline_id is not None  # found above, or just created
    created = api.call(
        f"upload version {version!r} of pipeline {name!r}",
        api.client.upload_pipeline_version,
        str(package),
        pipeline_version_name=version,
        pipeline_id=pipeline_id,
    )
    return Uploaded(
        pipeline_id,
        name,
        created.pipeline_version_id,
        version,
        new_pipeline,
        f"{api.host}/#/pipelines/details/{pipeline_id}/version/{created.pipeline_version_id}",
    )
