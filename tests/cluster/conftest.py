"""The cluster lane's fixtures: one real control plane on loopback for the whole session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import controlplane
from tests.cluster.profile import Profile
from tests.conftest import KfpStore

RUNNING_ENV = "BAKEOFF_CLUSTER"  # the state folder of a control plane already running (make cluster's .bakeoff/cluster)
# An image `make image` unpacked (~/.cache/bakeoff/image/current): the kubelet runs bakeoff's images from its root
# filesystem, as its user, instead of this venv (`make test` runs the 2-worker TFJob so; tests/cluster/kubelet).
IMAGE_ENV = "BAKEOFF_KUBELET_IMAGE"


# Stopped after tests/cluster (a package for that): idle, it takes ~10% of 2 cores, later runs see it as contention.
@pytest.fixture(scope="package")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[controlplane.ControlPlane]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the Training Operator and the process kubelet.

    Built from their Go modules on first use (cached outside the repository); a start-up failure fails the
    tests that need it with the component's name and log tail.
    """
    running = os.environ.get(RUNNING_ENV)
    if running:  # a developer's `make cluster`: used as it is, left running
        yield controlplane.ControlPlane.load(Path(running).resolve())
        return
    state = tmp_path_factory.mktemp("cluster")
    try:
        source = Path(os.environ.get(IMAGE_ENV) or sys.prefix)
        plane = controlplane.start(state, venv=source, log=lambda line: print(line, file=sys.stderr))
    except (controlplane.StartError, controlplane.binaries.BuildError) as error:
        pytest.fail(f"the control plane did not start: {error}", pytrace=False)
    yield plane
    controlplane.stop(state)


@pytest.fixture(scope="module")
def profile(control_plane: controlplane.ControlPlane, kfp_store: KfpStore, small_dataset: Path) -> Iterator[Profile]:
    """A Kubeflow profile's namespace with bakeoff's Role, the store's secret and a dataset (see profile.py)."""
    yield Profile(control_plane, kfp_store, small_dataset)
