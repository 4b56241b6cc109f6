"""`python -m tests.cluster.kubelet`: the command line; every bad flag is one line and exit status 2."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.cluster.kubelet.config import CACHE_DIR, POD_CIDR, KubeletConfig
from tests.cluster.kubelet.image import is_unpacked


def _pairs(values: Sequence[str], flag: str, what: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, rest = value.rpartition("=") if flag == "--image" else value.partition("=")
        if not sep or not key or not rest:
            raise SystemExit(f"kubelet: {flag} {value!r}: expected {what}")
        pairs[key] = rest
    return pairs


def _file(parser: argparse.ArgumentParser, path: Path | None, flag: str) -> None:
    if path is not None and not path.is_file():
        parser.error(f"{flag} {str(path)!r}: no such file")


def parse(argv: Sequence[str] | None = None) -> KubeletConfig:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.kubelet", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True, help="the node's credentials (CN=system:node:<node>)")
    parser.add_argument("--node", required=True, help="the Node's name")
    parser.add_argument("--state-dir", type=Path, required=True, help="pods' folders, logs, the kubelet's own log")
    parser.add_argument("--port", type=int, required=True, help="the log endpoint's port on 127.0.0.1")
    parser.add_argument("--serving-cert", type=Path, required=True, help="the log endpoint's TLS certificate")
    parser.add_argument("--serving-key", type=Path, required=True, help="its private key")
    parser.add_argument("--client-ca", type=Path, help="accept only log clients with a certificate from this CA")
    parser.add_argument(
        "--api-server", required=True, help="the API server's URL as pods reach it (KUBERNETES_SERVICE_HOST/PORT)"
    )
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="IMAGE=DIR",
        help="run containers of IMAGE in the virtual environment DIR, or from the image `make image` unpacked in DIR "
        "(~/.cache/bakeoff/image/current: its rootfs/, as its USER) (repeatable)",
    )
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME=ADDRESS",
        help="an extra entry of every pod's hosts file (repeatable)",
    )
    parser.add_argument("--pod-cidr", default=POD_CIDR, help=f"loopback network of pod addresses (default {POD_CIDR})")
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR, help="where the compiled bind shim is kept")
    args = parser.parse_args(argv)
    for path, flag in (
        (args.kubeconfig, "--kubeconfig"),
        (args.serving_cert, "--serving-cert"),
        (args.serving_key, "--serving-key"),
        (args.client_ca, "--client-ca"),
    ):
        _file(parser, path, flag)
    images = {name: Path(folder) for name, folder in _pairs(args.image, "--image", "IMAGE=DIR").items()}
    for name, folder in images.items():
        if not (folder / "bin").is_dir() and not is_unpacked(folder):
            parser.error(
                f"--image {name}={folder}: neither a virtual environment (bin/) nor an unpacked image (rootfs/, oci/):"
                " give .venv, or run `make image` and give ~/.cache/bakeoff/image/current"
            )
    try:
        pod_cidr = ipaddress.IPv4Network(args.pod_cidr)
    except ValueError as error:
        parser.error(f"--pod-cidr {args.pod_cidr!r}: {error}")
    return KubeletConfig(
        kubeconfig=args.kubeconfig,
        node=args.node,
        state_dir=args.state_dir.resolve(),
        port=args.port,
        serving_cert=args.serving_cert,
        serving_key=args.serving_key,
        client_ca=args.client_ca,
        api_server=args.api_server,
        images=images,
        pod_cidr=pod_cidr,
        hosts=_pairs(args.host, "--host", "NAME=ADDRESS"),
        cache_dir=args.cache_dir,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse(argv)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=config.state_dir / "kubelet.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
    )
    from tests.cluster.kubelet.kubelet import Kubelet  # after the flags: --help needs no API client

    kubelet = Kubelet(config)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: kubelet.stop())
    try:
        kubelet.run()
    except Exception as error:
        logging.getLogger("kubelet").exception("kubelet failed")
        print(f"kubelet: {error} (log: {config.state_dir / 'kubelet.log'})", file=sys.stderr)
        kubelet.stop()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
