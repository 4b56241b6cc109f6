"""The process kubelet's settings (one record, from the command line) and its defaults, once."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "images" / "Dockerfile"  # the environment bakeoff's image sets, read at start
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bakeoff" / "kubelet"
POD_CIDR = "127.1.0.0/16"  # pods get loopback addresses from here; the control plane keeps 127.0.0.1
CLUSTER_DOMAIN = "cluster.local"
POD_IP_ENV = "BAKEOFF_POD_IP"  # what the bind shim reads: the address a wildcard bind() is moved to
# Node registration and heartbeats, as the kubelet's defaults (40 s lease, renewed every 10 s).
LEASE_SECONDS = 40
LEASE_RENEW_SECONDS = 10.0
NODE_STATUS_SECONDS = 60.0  # the kubelet re-reports an unchanged status every 5 min; often enough for a test run
CAPACITY = {"cpu": "1000", "memory": "1Ti", "pods": "1000", "ephemeral-storage": "1Ti"}  # never the reason a pod waits
# Container restarts: the kubelet's back-off (10 s doubling to 5 min) kept short, so tests see restarts quickly.
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 5.0
BACKOFF_RESET_SECONDS = 60.0  # a container that ran this long starts its back-off over, as the kubelet's 10 min
SHUTDOWN_GRACE_SECONDS = 5.0  # the kubelet's own SIGTERM: containers get this long before SIGKILL
DEFAULT_GRACE_SECONDS = 30  # a pod deleted without deletionGracePeriodSeconds (the API server always sets it)
API_RETRY_SECONDS = 15.0  # the Node authorizer learns a pod's secrets a moment after the binding: retry a 403 this long
TOKEN_REFRESH_FRACTION = 0.8  # a projected token is renewed after this much of its life, as the kubelet does
WATCH_TIMEOUT_SECONDS = 300  # one watch request; the next resumes from its last resourceVersion
LOG_LINE_BYTES = 16 * 1024  # longer lines are split into partial (P) records, as container runtimes do
STATUS_PATCH_SECONDS = 0.2  # coalesces a pod's status changes into one patch


@dataclass(frozen=True)
class KubeletConfig:
    """Everything the kubelet is told at start."""

    kubeconfig: Path
    node: str
    state_dir: Path
    port: int
    serving_cert: Path
    serving_key: Path
    api_server: str  # the URL pods reach the API server at: KUBERNETES_SERVICE_HOST/PORT
    images: Mapping[str, Path]  # image name → the virtual environment its containers run in
    client_ca: Path | None = None  # when given, the log endpoint accepts only clients it signed
    pod_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network(POD_CIDR)
    hosts: Mapping[str, str] = field(default_factory=dict)  # extra host name → address in every pod's hosts file
    cache_dir: Path = CACHE_DIR
    dockerfile: Path = DOCKERFILE

    @property
    def api_host(self) -> str:
        return urlsplit(self.api_server).hostname or "127.0.0.1"

    @property
    def api_port(self) -> int:
        return urlsplit(self.api_server).port or 443

    @property
    def pods_dir(self) -> Path:
        return self.state_dir / "pods"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"
