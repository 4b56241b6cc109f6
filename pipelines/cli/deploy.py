"""`bakeoff deploy`: serve the newest published version on KServe, through the Kubernetes API."""

from __future__ import annotations

import argparse
import sys

from bakeoff.components import arguments, defaults
from bakeoff.components.errors import BakeoffError


def cmd_deploy(args: argparse.Namespace) -> int:
    from bakeoff.components.serving import deploy

    if args.namespace is not None and not args.namespace.strip():
        raise BakeoffError("--namespace is empty: pass your profile's namespace, or leave it out for the kube-config's")
    name = deploy.service_name(args.model_name)  # before any connection
    deploy.check_store(args.store)
    cluster = deploy.connect()
    namespace = args.namespace or cluster.namespace
    uri = deploy.storage_uri(args.store, namespace, args.model_name)
    version = args.version or deploy.latest_version(
        args.store, namespace, args.model_name, args.s3_endpoint, args.s3_insecure
    )
    done = deploy.deploy(cluster, namespace, name, uri, version, args.image)
    if done.runtime != "kept":
        print(f"{done.runtime} servingruntime {deploy.RUNTIME_NAME} in {namespace} (image {done.image})")
    if done.action == "created":
        print(f"created inferenceservice {name} in {namespace}: version {version} from {uri}")
    elif done.action == "updated":
        was = f"version {done.previous}" if done.previous is not None else "an unversioned spec"
        print(
            f"updated inferenceservice {name} in {namespace}: {was} -> version {version}; the old revision serves "
            "until the new one is Ready"
        )
    else:
        print(f"inferenceservice {name} in {namespace} already serves version {version}")
    if not args.wait:
        print(f"follow it with `kubectl get inferenceservice {name} -n {namespace} -w`, or run deploy with --wait")
        return 0
    timeout = args.timeout or defaults.DEPLOY_TIMEOUT_SECONDS
    print(f"waiting up to {timeout} s for inferenceservice {name} to be Ready", file=sys.stderr, flush=True)
    print(deploy.wait_ready(cluster, done, timeout))
    return 0


def add_deploy_commands(commands: argparse._SubParsersAction) -> None:
    """Registers deploy."""
    parser = commands.add_parser(
        "deploy",
        help="serve the newest published model on KServe: create the InferenceService, or roll it to a new version",
        description="Creates bakeoff's ServingRuntime when missing and creates or patches the InferenceService; an "
        "update rolls out"
        " a new revision beside the old one, never deleting the service. The S3 secret and its service account come"
        " from manifests/kserve (kubectl apply -k).",
    )
    parser.add_argument(
        "--namespace", help="where the InferenceService runs (default: the pod's, else the kube-config context's)"
    )
    parser.add_argument(
        "--model-name",
        default=defaults.MODEL_NAME,
        help=f"published model, also the InferenceService's name (default {defaults.MODEL_NAME})",
    )
    parser.add_argument(
        "--store",
        default=defaults.CLUSTER_STORE,
        help=f"the store the pipeline publishes to, s3://BUCKET/PREFIX; {{namespace}} is the target namespace"
        f" (default {defaults.CLUSTER_STORE})",
    )
    parser.add_argument(
        "--version",
        type=arguments.whole("--version"),
        help="version to roll out (default: the newest complete one in --store, which needs an S3 endpoint reachable "
        "from here)",
    )
    parser.add_argument(
        "--s3-endpoint", help="HOST:PORT of the store's S3 server, to find the newest version (or $BAKEOFF_S3_ENDPOINT)"
    )
    parser.add_argument(
        "--s3-insecure",
        action="store_true",
        default=None,
        help="plain HTTP to the S3 server (or BAKEOFF_S3_INSECURE=1)",
    )
    parser.add_argument(
        "--image",
        help="model server image, your build of images/Dockerfile; replaces the runtime's"
        " (default: keep it; required when deploy creates the runtime)",
    )
    parser.add_argument(
        "--wait", action="store_true", help="wait until the service is Ready for this version, then print its URL"
    )
    parser.add_argument(
        "--timeout",
        type=arguments.whole("--timeout"),
        metavar="S",
        help=f"seconds --wait waits before it fails (default {defaults.DEPLOY_TIMEOUT_SECONDS})",
    )
    parser.set_defaults(handler=cmd_deploy)
