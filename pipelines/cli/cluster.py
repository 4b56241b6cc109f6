"""The cluster commands of `bakeoff`: upload, submit, schedule and schedules, against a KFP API."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from bakeoff.components import defaults
from bakeoff.components.environment import IMAGE_ENV
from bakeoff.components.errors import BakeoffError
from bakeoff.pipelines.cli.flags import compile_settings, pipeline_args
from bakeoff.pipelines.kfp_client import connection, endpoint, packages, parameters, runs, schedules, triggers, uploads

NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # DNS-1123 label, as Kubernetes names namespaces
RUN_ID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_]{0,127}")  # KFP's ids are UUIDs


def _connection_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection to the KFP API")
    group.add_argument(
        "--host",
        metavar="URL",
        help="KFP API address, e.g. http://localhost:8080 after `kubectl port-forward -n kubeflow svc/ml-pipeline-ui "
        f"8080:80` (or ${endpoint.HOST_ENV})",
    )
    group.add_argument(
        "--namespace", help="your profile's namespace on a multi-user KFP (default: the pod's own, in a cluster)"
    )
    # A secret on the command line shows in `ps` and the shell's history: each has a file and a variable too.
    token = group.add_mutually_exclusive_group()
    token.add_argument(
        "--token",
        help=f"bearer token; it shows in `ps`, so prefer --token-file, ${endpoint.TOKEN_ENV} or the file "
        f"${endpoint.TOKEN_FILE_ENV} names (precedence: --token or --token-file, "
        f"then ${endpoint.TOKEN_FILE_ENV}, then ${endpoint.TOKEN_ENV})",
    )
    token.add_argument("--token-file", type=Path, metavar="FILE", help="file holding the bearer token")
    cookies = group.add_mutually_exclusive_group()
    cookies.add_argument(
        "--cookies",
        metavar="COOKIES",
        help="Cookie header of a logged-in browser session, for Dex/oauth2-proxy installs, e.g. "
        "'authservice_session=...'; "
        f"it shows in `ps`, so prefer --cookies-file or ${endpoint.COOKIES_ENV} "
        f"(precedence: --cookies or --cookies-file, then ${endpoint.COOKIES_ENV})",
    )
    cookies.add_argument("--cookies-file", type=Path, metavar="FILE", help="file holding the Cookie header")
    group.add_argument("--insecure", action="store_true", help="skip TLS certificate verification")
    group.add_argument(
        "--ca-cert", type=Path, metavar="FILE", help="PEM file of the CA that signed the API's certificate"
    )


def _param_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--experiment", default="bakeoff", help="experiment the runs belong to, created on first use (default bakeoff)"
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pipeline parameter, typed as the pipeline declares it; repeatable "
        "(e.g. shards=4, metric=val_loss, max_train_examples=2048)",
    )


def _target(args: argparse.Namespace) -> endpoint.Target:
    """The connection settings, checked here so that a bad one fails before anything else happens."""
    if args.insecure and args.ca_cert:
        raise BakeoffError(
            "--insecure and --ca-cert are both given: verify with --ca-cert, or skip verification with --insecure"
        )
    if args.namespace is not None and not NAMESPACE.fullmatch(args.namespace):
        raise BakeoffError(
            f"--namespace {args.namespace!r} is not a Kubernetes namespace:"
            " lower-case letters, digits and '-', at most 63 characters"
        )
    return endpoint.Target(
        host=endpoint.normalize_host(args.host),
        namespace=args.namespace or None,
        token=endpoint.resolve_token(args.token, file=args.token_file),
        cookies=endpoint.resolve_cookies(args.cookies, args.cookies_file),
        verify_tls=not args.insecure,
        ca_cert=args.ca_cert,
    )


def _names(args: argparse.Namespace, *flags: str) -> None:
    """Empty names would only be refused by the server, after the experiment or pipeline lookups."""
    for flag in flags:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None and not value.strip():
            raise BakeoffError(f"{flag} is empty: pass a name, or leave {flag} out for the default")


def _compile_flags(args: argparse.Namespace) -> list[str]:
    """The flags of ``pipeline_args`` given other than their defaults: what compiling would use."""
    changed = {
        "--config": args.config != defaults.CONFIG,
        "--image": args.image not in (None, os.environ.get(IMAGE_ENV) or None),
        "--parallelism": args.parallelism != defaults.CLUSTER_PARALLELISM,
        "--budget": args.budget is not None,
        "--store": args.store != defaults.CLUSTER_STORE,
        "--s3-endpoint": args.s3_endpoint != defaults.CLUSTER_S3_ENDPOINT,
        "--cpu": bool(args.cpu),
        "--memory": bool(args.memory),
    }
    return [flag for flag, given in changed.items() if given]


@contextlib.contextmanager
def _package(args: argparse.Namespace) -> Iterator[tuple[Path, dict]]:
    """The file upload sends and its IR: --package as it is, else the pipeline compiled from the flags."""
    if args.package is None:
        with packages.compiled(compile_settings(args, sends=True)) as compiled:
            yield compiled
        return
    ignored = _compile_flags(args)
    if ignored:
        raise BakeoffError(
            f"--package uploads {str(args.package)!r} as it is, so {' and '.join(ignored)} would change nothing:"
            " drop them, or leave out --package to compile the pipeline with them"
        )
    spec = packages.checked_package(args.package)
    images = {
        executor.get("container", {}).get("image")
        for executor in spec.get("deploymentSpec", {}).get("executors", {}).values()
    }
    if defaults.IMAGE in images:
        print(
            f"bakeoff: {args.package} runs {defaults.IMAGE}, the default image, which nobody publishes: its pods"
            " will not start unless your cluster has that image; compile with --image REGISTRY/bakeoff:TAG",
            file=sys.stderr,
        )
    yield args.package, spec


def cmd_upload(args: argparse.Namespace) -> int:
    _names(args, "--name", "--version")
    target = _target(args)
    if args.shared and target.namespace:
        raise BakeoffError(
            "--shared and --namespace are both given: --namespace uploads a private pipeline to that profile,"
            " --shared one that every user sees; choose one"
        )
    with _package(args) as (package, spec):
        name = args.name if args.name is not None else spec["pipelineInfo"]["name"]
        api = connection.connect(
            target,
            need_namespace=not args.shared,
            or_else="for a private pipeline, or --shared for one that every user sees",
        )
        uploaded = uploads.upload(api, package, name, args.version)
    ids = f"pipeline {uploaded.pipeline_name!r} (id {uploaded.pipeline_id})"
    shared = api.multi_user and api.namespace is None
    if api.multi_user:
        ids = f"shared {ids}" if shared else f"{ids} in namespace {api.namespace!r}"
    version = f"version {uploaded.version_name!r} (id {uploaded.version_id})"
    line = f"created {ids} with {version}" if uploaded.new_pipeline else f"added {version} to {ids}"
    print(line + (": every user of this KFP sees it and may run it" if shared else ""))
    print(uploaded.url)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    _names(args, "--name", "--experiment")
    target = _target(args)
    settings = compile_settings(args, sends=True)
    with packages.compiled(settings) as (package, spec):
        params = parameters.parse_params(args.param, parameters.pipeline_parameters(spec))
        parameters.check_run(spec, params)
        api = connection.connect(target)
        run_name = args.name or runs.default_run_name(spec["pipelineInfo"]["name"])
        submitted = runs.submit(api, package, args.experiment, params, run_name)
    print(f"submitted run {submitted.run_id} ({submitted.name!r}) to experiment {args.experiment!r}")
    print(submitted.url, flush=True)
    if not args.wait:
        return 0
    run = runs.wait_for_run(
        api,
        submitted.run_id,
        report=lambda state: print(f"run {submitted.run_id}: {state}", file=sys.stderr, flush=True),
    )
    if run.state == "SUCCEEDED":
        print(f"run {submitted.run_id} succeeded")
        return 0
    reason = f" ({' '.join(run.error.message.split())})" if run.error is not None and run.error.message else ""
    raise BakeoffError(f"run {submitted.run_id} ended {run.state}{reason}: see its logs at {submitted.url}")


def cmd_schedule(args: argparse.Namespace) -> int:
    _names(args, "--name", "--experiment")
    target = _target(args)
    trigger = triggers.make_trigger(args.cron, args.every, args.start, args.end)
    max_concurrency = schedules.check_max_concurrency(args.max_concurrency)
    settings = compile_settings(args, sends=True)
    with packages.compiled(settings) as (package, spec):
        params = parameters.parse_params(args.param, parameters.pipeline_parameters(spec))
        parameters.check_run(spec, params)
        api = connection.connect(target)
        name = args.name or f"{spec['pipelineInfo']['name']} {trigger.describe()}"
        scheduled = schedules.schedule(
            api,
            package,
            args.experiment,
            trigger,
            params,
            name,
            max_concurrency=max_concurrency,
            no_catchup=args.no_catchup,
        )
    window = "".join(
        f", {word} {moment}" for word, moment in (("from", trigger.start), ("until", trigger.end)) if moment
    )
    catchup = ", no catch-up" if args.no_catchup else ""
    print(
        f"created recurring run {scheduled.recurring_run_id} ({name!r}: {trigger.describe()}{window}, "
        f"at most {max_concurrency} at a time{catchup}) in experiment {args.experiment!r}"
    )
    print(scheduled.url)
    return 0


def cmd_schedules_list(args: argparse.Namespace) -> int:
    api = connection.connect(_target(args))
    found = schedules.list_schedules(api)
    if not found:
        where = f" in namespace {api.namespace!r}" if api.namespace else ""
        print(f"no recurring runs on {api.host}{where}")
        return 0
    print(f"{'id':<38}{'status':<10}{'trigger':<26}{'max':>4}  name")
    for run in found:
        status = (run.status or "-").lower()
        print(
            f"{run.recurring_run_id:<38}{status:<10}{triggers.describe_trigger(run.trigger):<26}"
            f"{run.max_concurrency or '-':>4}  {run.display_name}"
        )
    return 0


def cmd_schedules_change(args: argparse.Namespace) -> int:
    if not RUN_ID.fullmatch(args.id):  # it becomes a URL path segment: '../' or '?' would address another resource
        raise BakeoffError(f"{args.id!r} is not a recurring run id: copy one from `bakeoff schedules list`")
    api = connection.connect(_target(args), need_namespace=False)  # the id is enough; the server checks its namespace
    done = schedules.change_schedule(api, args.schedules_command, args.id)
    print(f"{done} recurring run {args.id}")
    return 0


def add_cluster_commands(commands: argparse._SubParsersAction) -> None:
    """Registers upload, submit, schedule and schedules; the first three compile the pipeline as `compile` does."""
    upload = commands.add_parser(
        "upload", help="upload the compiled pipeline to KFP; an existing name gets a new version"
    )
    upload.add_argument("--name", help="pipeline name (default: the pipeline's own, bakeoff)")
    upload.add_argument(
        "--version",
        help="name of the new version (default: UTC time and content hash; "
        "without it a new pipeline's first version is named after the pipeline)",
    )
    upload.add_argument(
        "--package",
        type=Path,
        metavar="FILE",
        help="upload this compiled pipeline as it is (e.g. pipelines/bakeoff.yaml) instead of compiling one",
    )
    upload.add_argument(
        "--shared",
        action="store_true",
        help="on a multi-user KFP, upload a shared pipeline that every user sees and may run, instead of one"
        " private to --namespace (the default, as in the KFP UI)",
    )
    pipeline_args(upload, sends=True)
    _connection_args(upload)
    upload.set_defaults(handler=cmd_upload)

    submit = commands.add_parser("submit", help="run the compiled pipeline once on KFP")
    submit.add_argument("--name", help="run name (default: bakeoff and the UTC time)")
    _param_args(submit)
    submit.add_argument("--wait", action="store_true", help="follow the run to its end; exit 1 unless it succeeds")
    pipeline_args(submit, sends=True)
    _connection_args(submit)
    submit.set_defaults(handler=cmd_submit)

    schedule = commands.add_parser("schedule", help="run the compiled pipeline on KFP on a schedule (a recurring run)")
    schedule.add_argument(
        "--cron", help="KFP cron: 6 fields, seconds first, e.g. '0 0 3 * * *' for 03:00 every day (UTC)"
    )
    schedule.add_argument("--every", metavar="INTERVAL", help="interval between runs: 90s, 30m, 6h, 1d")
    schedule.add_argument("--name", help="recurring run name (default: bakeoff and the trigger)")
    _param_args(schedule)
    schedule.add_argument(
        "--max-concurrency",
        type=int,
        default=1,
        metavar="N",
        help=f"runs at once, 1-{schedules.MAX_CONCURRENCY} (default 1)",
    )
    schedule.add_argument(
        "--no-catchup", action="store_true", help="after a pause, start only the latest missed run instead of every one"
    )
    schedule.add_argument("--start", metavar="ISO", help="first time it may run, ISO 8601 (UTC without an offset)")
    schedule.add_argument("--end", metavar="ISO", help="last time it may run, ISO 8601 (UTC without an offset)")
    pipeline_args(schedule, sends=True)
    _connection_args(schedule)
    schedule.set_defaults(handler=cmd_schedule)

    recurring = commands.add_parser("schedules", help="list, enable, disable or delete recurring runs on KFP")
    actions = recurring.add_subparsers(dest="schedules_command", required=True)
    listing = actions.add_parser("list", help="the recurring runs, newest first")
    _connection_args(listing)
    listing.set_defaults(handler=cmd_schedules_list)
    for action, text in (
        ("enable", "start scheduling runs again"),
        ("disable", "stop scheduling runs; keep it"),
        ("delete", "remove it; its past runs stay"),
    ):
        change = actions.add_parser(action, help=f"{text}")
        change.add_argument("id", help="recurring run id (from `bakeoff schedules list`)")
        _connection_args(change)
        change.set_defaults(handler=cmd_schedules_change)
