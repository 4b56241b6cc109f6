"""The process kubelet's parts that need no API server: expansion, env, hosts files, logs, phase, the bind shim."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes.client import (
    V1ConfigMapKeySelector,
    V1Container,
    V1EnvFromSource,
    V1EnvVar,
    V1EnvVarSource,
    V1ObjectFieldSelector,
    V1SecretEnvSource,
    V1SecretKeySelector,
    V1VolumeMount,
)

from bakeoff.components.ports import free_ports
from tests.cluster.kubelet import layout, logs, sandbox, shim
from tests.cluster.kubelet.config import POD_IP_ENV
from tests.cluster.kubelet.image import Image, ImageConfig, read_dockerfile
from tests.cluster.kubelet.names import HostsTable, PodName, ServiceName
from tests.cluster.kubelet.podenv import ConfigError, PodFacts, command_line, container_env, expand
from tests.cluster.kubelet.server import LogError, choose, parse_query
from tests.cluster.kubelet.status import ContainerStatus, Running, Terminated, Waiting, phase

REPO = Path(__file__).resolve().parents[2]
FACTS = PodFacts(
    name="p",
    namespace="ns",
    uid="u-1",
    node="n",
    service_account="sa",
    pod_ip="127.1.0.7",
    host_ip="127.0.0.1",
    labels={"app": "a"},
)


class Objects:
    """Secrets and ConfigMaps as the API server would hold them (a dict per kind)."""

    def __init__(self, secrets: dict[str, dict[str, bytes]], config_maps: dict[str, dict[str, bytes]]) -> None:
        self.secrets, self.config_maps = secrets, config_maps

    def secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        return self.secrets.get(name)

    def config_map(self, namespace: str, name: str) -> dict[str, bytes] | None:
        return self.config_maps.get(name)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("$(A)-$(B)", "1-$(B)"),  # an unknown reference stays as written
        ("$$(A)", "$(A)"),  # `$$` escapes
        ("$(A", "$(A"),  # unclosed
        ("a$", "a$"),
        ("$x$(A)", "$x1"),
        ("$(A)$(A)", "11"),
    ],
)
def test_expand_follows_kubernetes(text: str, expected: str) -> None:
    assert expand(text, {"A": "1"}) == expected


def test_container_env_resolves_every_source_in_order() -> None:
    objects = Objects({"creds": {"user": b"alice", "token": b"t0k"}}, {"settings": {"mode": b"fast", "level": b"3"}})
    container = V1Container(
        name="c",
        image="i",
        command=["echo", "$(USER_NAME)", "$(MISSING)"],
        env_from=[V1EnvFromSource(secret_ref=V1SecretEnvSource(name="creds"), prefix="S_")],
        env=[
            V1EnvVar(
                name="USER_NAME",
                value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name="creds", key="user")),
            ),
            V1EnvVar(
                name="MODE",
                value_from=V1EnvVarSource(config_map_key_ref=V1ConfigMapKeySelector(name="settings", key="mode")),
            ),
            V1EnvVar(name="WHERE", value="$(POD_IP):$(KUBERNETES_SERVICE_PORT)"),
            V1EnvVar(
                name="POD_IP", value_from=V1EnvVarSource(field_ref=V1ObjectFieldSelector(field_path="status.podIP"))
            ),
            V1EnvVar(
                name="APP",
                value_from=V1EnvVarSource(field_ref=V1ObjectFieldSelector(field_path="metadata.labels['app']")),
            ),
            V1EnvVar(
                name="GONE",
                value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name="nope", key="k", optional=True)),
            ),
        ],
    )
    env = container_env(container, FACTS, objects, {"KUBERNETES_SERVICE_PORT": "6443"})
    assert env["S_user"] == "alice" and env["S_token"] == "t0k"
    assert (env["USER_NAME"], env["MODE"], env["POD_IP"], env["APP"]) == ("alice", "fast", "127.1.0.7", "a")
    assert env["WHERE"] == "$(POD_IP):6443"  # only variables defined before it expand
    assert "GONE" not in env
    assert command_line(container, ImageConfig(env={}), env) == ["echo", "alice", "$(MISSING)"]


def test_container_env_names_what_is_missing() -> None:
    container = V1Container(
        name="c",
        image="i",
        env=[
            V1EnvVar(
                name="X", value_from=V1EnvVarSource(secret_key_ref=V1SecretKeySelector(name="creds", key="absent"))
            )
        ],
    )
    with pytest.raises(ConfigError, match="couldn't find key absent in Secret ns/creds"):
        container_env(container, FACTS, Objects({"creds": {"user": b"a"}}, {}), {})
    with pytest.raises(ConfigError, match='secret "creds" not found'):
        container_env(container, FACTS, Objects({}, {}), {})


def test_command_line_falls_back_to_the_image() -> None:
    image = ImageConfig(env={}, entrypoint=("/entry",), cmd=("default",))
    assert command_line(V1Container(name="c"), image, {}) == ["/entry", "default"]
    assert command_line(V1Container(name="c", args=["x"]), image, {}) == ["/entry", "x"]
    assert command_line(V1Container(name="c", command=["run"]), image, {}) == ["run"]


def test_dockerfile_config_is_the_images() -> None:
    config = read_dockerfile(REPO / "images" / "Dockerfile")
    assert config.env["PYTHONUNBUFFERED"] == "1" and config.env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert config.env["HOME"] == config.workdir == "/home/bakeoff"
    assert config.cmd == ("bakeoff", "--help")


def test_hosts_file_maps_services_to_ready_pods() -> None:
    table = HostsTable("cluster.local", {"store.example": "127.0.0.1"})
    table.set_pod("a", PodName("ns", "job-worker-0", "127.1.0.1", "job-worker-0", labels={"replica": "0"}))
    table.set_pod("b", PodName("ns", "job-worker-1", "127.1.0.2", "job-worker-1", labels={"replica": "1"}))
    table.set_services(
        [
            ServiceName("ns", "job-worker-0", {"replica": "0"}),
            ServiceName("ns", "job-worker-1", {"replica": "1"}),
            ServiceName("other", "job-worker-1", {"replica": "1"}),
            ServiceName("ns", "no-selector", {}),
        ]
    )
    assert "job-worker-0" not in table.render("b").split("# Cluster names")[1]  # not ready yet
    table.update_pod("a", ready=True)
    table.update_pod("b", ready=True)
    hosts = table.render("b")
    assert "127.1.0.2\tjob-worker-1\n" in hosts  # its own name first
    assert "127.1.0.1\tjob-worker-0.ns.svc.cluster.local\tjob-worker-0.ns.svc\tjob-worker-0.ns\tjob-worker-0\n" in hosts
    assert "store.example" in hosts and "no-selector" not in hosts
    assert "job-worker-1.other" not in hosts  # the other namespace's Service selects no pod of its namespace


def test_hosts_file_names_a_subdomains_pods_as_cluster_dns_and_the_search_path_do() -> None:
    """An indexed Job's pods under a headless Service (JobSet's): peers address each other as <hostname>.<subdomain>."""
    table = HostsTable("cluster.local", {})
    for uid, index in (("a", 0), ("b", 1)):
        table.set_pod(
            uid, PodName("ns", f"js-node-0-{index}-x", f"127.1.0.{index + 1}", f"js-node-0-{index}", subdomain="js")
        )
    table.set_pod("c", PodName("other", "elsewhere", "127.1.0.9", "elsewhere"))
    hosts = table.render("a")
    assert hosts.count("127.1.0.1\tjs-node-0-0.js.ns.svc.cluster.local\tjs-node-0-0\n") == 1  # the kubelet's own line
    assert "127.1.0.1\tjs-node-0-0.js.ns.svc\tjs-node-0-0.js.ns\tjs-node-0-0.js\n" in hosts
    peer = "127.1.0.2\tjs-node-0-1.js.ns.svc.cluster.local\tjs-node-0-1.js.ns.svc\tjs-node-0-1.js.ns"
    assert f"{peer}\tjs-node-0-1.js\n" in hosts
    assert f"{peer}\n" in table.render("c")  # another namespace's search path does not complete the shortest name


def test_hosts_file_is_rewritten_in_place(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    table = HostsTable("cluster.local", {})
    table.set_pod("a", PodName("ns", "p", "127.1.0.1", "p", labels={"app": "x"}, hosts_file=hosts))
    inode = hosts.stat().st_ino
    table.set_services([ServiceName("ns", "svc", {"app": "x"}, publish_not_ready=True)])
    assert "svc.ns.svc" in hosts.read_text() and hosts.stat().st_ino == inode


def _log(tmp_path: Path, lines: list[tuple[str, bytes]]) -> logs.LogFile:
    log = logs.LogFile(tmp_path / "0.log")
    for stream, chunk in lines:
        log.append(stream, chunk)
    return log


def test_log_records_are_cri_and_read_back(tmp_path: Path) -> None:
    log = _log(tmp_path, [("stdout", b"one\n"), ("stderr", b"two\n"), ("stdout", b"par"), ("stdout", b"tial\n")])
    log.close()
    first = log.path.read_bytes().splitlines()[0].split(b" ")
    assert first[1:] == [b"stdout", b"F", b"one"] and len(first[0]) == len("2024-01-01T00:00:00.000000000Z")
    assert b"".join(logs.read(log, logs.LogQuery())) == b"one\ntwo\npartial\n"
    assert b"".join(logs.read(log, logs.LogQuery(tail_lines=2))) == b"partial\n"
    assert b"".join(logs.read(log, logs.LogQuery(limit_bytes=6))) == b"one\ntw"
    stamped = b"".join(logs.read(log, logs.LogQuery(timestamps=True))).splitlines()
    assert stamped[2].endswith(b" partial") and stamped[2].count(b"Z ") == 1  # one stamp for a joined line
    later = logs.parse_timestamp(first[0].decode()) + 1
    assert b"".join(logs.read(log, logs.LogQuery(since_ns=later))) in (b"two\npartial\n", b"partial\n", b"")


def test_follow_ends_when_the_container_does(tmp_path: Path) -> None:
    log = _log(tmp_path, [("stdout", b"first\n")])
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(logs.read(log, logs.LogQuery(follow=True))))
    reader.start()
    log.append("stdout", b"second\n")
    log.close()
    reader.join(10)
    assert not reader.is_alive() and b"".join(got) == b"first\nsecond\n"


def test_log_choice_follows_the_kubelets_rules(tmp_path: Path) -> None:
    runs = {"process://1": _log(tmp_path, [])}
    status = ContainerStatus("c", "img", state=Waiting("ContainerCreating"))
    with pytest.raises(LogError, match='container "c" in pod "p" is waiting to start: ContainerCreating'):
        choose(status, runs, False, "p")
    status.state, status.container_id = Running(NOW), "process://1"
    assert choose(status, runs, False, "p") is runs["process://1"]
    with pytest.raises(LogError, match='previous terminated container "c" in pod "p" not found'):
        choose(status, runs, True, "p")
    previous, query = parse_query("previous=true&follow=true&tailLines=3&sinceSeconds=5")
    assert previous and query.follow and query.tail_lines == 3 and query.since_ns is not None


NOW = datetime.now(UTC)


def _done(code: int) -> Terminated:
    return Terminated(code, NOW, NOW)


@pytest.mark.parametrize(
    "policy, codes, expected",
    [
        ("Never", [0, 0], "Succeeded"),
        ("Never", [0, 1], "Failed"),
        ("OnFailure", [0, 1], "Running"),
        ("Always", [0, 0], "Running"),
        ("OnFailure", [0, 0], "Succeeded"),
    ],
)
def test_phase_as_the_kubelet_computes_it(policy: str, codes: list[int], expected: str) -> None:
    statuses = [ContainerStatus(f"c{i}", "img", state=_done(code)) for i, code in enumerate(codes)]
    assert phase(policy, [], statuses) == expected


def test_phase_waits_for_init_containers() -> None:
    init = [ContainerStatus("i", "img", state=Running(NOW))]
    assert phase("Never", init, [ContainerStatus("c", "img", state=Waiting("PodInitializing"))]) == "Pending"
    init[0].state = _done(1)
    assert phase("Never", init, [ContainerStatus("c", "img", state=Waiting("PodInitializing"))]) == "Failed"


def test_resolve_executable_looks_through_mounts(tmp_path: Path) -> None:
    (tmp_path / "launch").write_text("#!/bin/sh\n")
    (tmp_path / "launch").chmod(0o755)
    mounts = [sandbox.Mount(tmp_path, "/kfp-launcher")]
    sandbox.resolve_executable(["/kfp-launcher/launch"], {}, "/", mounts)
    with pytest.raises(sandbox.StartError, match='exec: "nope": executable file not found in \\$PATH'):
        sandbox.resolve_executable(["nope"], {"PATH": "/usr/bin"}, "/", mounts)


def test_a_volume_over_the_images_files_is_refused(tmp_path: Path) -> None:
    """A real image's files are its own; here they are this machine's, and a volume over them would hide Python."""
    venv = tmp_path / "work" / "venv"
    (venv / "bin").mkdir(parents=True)
    image = Image("img", venv, ImageConfig(env={}))
    container = V1Container(name="c", volume_mounts=[V1VolumeMount(name="data", mount_path=str(tmp_path / "work"))])
    with pytest.raises(sandbox.StartError, match=f"volume 'data' mounted at {tmp_path}/work would hide"):
        layout.container_mounts(container, {"data": tmp_path}, tmp_path / "c", tmp_path / "hosts", image, {})
    container.volume_mounts[0].mount_path = "/data"
    mounts, _ = layout.container_mounts(container, {"data": tmp_path}, tmp_path / "c", tmp_path / "hosts", image, {})
    # tmp_path lies below /tmp: the private /tmp shows the image's venv again, at its own path.
    assert [m.target for m in mounts] == ["/tmp", "/data", "/etc/hosts", "/dev/termination-log", str(venv)]
    assert mounts[-1].host and mounts[-1].source == venv


def test_an_image_below_tmp_stays_visible_through_the_private_tmp(tmp_path: Path) -> None:
    """A clone under /tmp (CI's may be): its .venv and the sources its editable install reads are shown again."""
    project = tmp_path / "clone"
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    image = Image("img", project / ".venv", ImageConfig(env={}))
    assert project in image.files
    mounts, _ = layout.container_mounts(V1Container(name="c"), {}, tmp_path / "c", tmp_path / "hosts", image, {})
    shown = {m.target: m for m in mounts}
    assert shown["/tmp"].source == tmp_path / "c" / "tmp"
    assert shown[str(project)].host and shown[str(project / ".venv")].host


PROBE = textwrap.dedent("""
    import os, socket
    print(socket.gethostname(), os.getcwd())
    for path in ("/var/run/secrets/kubernetes.io/serviceaccount/token", "/home/bakeoff/h", "/kfp-launcher/x/f",
                 "/dev/termination-log", "/tmp/private"):
        print(path, open(path).read() if os.path.isfile(path) else "-")
    print(" ".join(sorted(os.listdir("/run"))))
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
def test_a_container_sees_its_mounts_and_the_machine_gets_nothing(tmp_path: Path) -> None:
    """Mount points that this machine lacks (below /run, /home, /dev and at the root) are made on tmpfs
    inside the container's namespace; the machine's own tree is left exactly as it was."""
    watched = ["/var/run/secrets/kubernetes.io", "/home/bakeoff", "/kfp-launcher", "/dev/termination-log"]
    before = {path: os.path.lexists(path) for path in watched}
    sources = {}
    for name, content in (("token", "t0k"), ("home", None), ("launcher", None), ("message", "")):
        sources[name] = tmp_path / name
        if content is None:
            sources[name].mkdir()
        else:
            sources[name].write_text(content)
    (sources["home"] / "h").write_text("home")
    (sources["launcher"] / "x").mkdir()
    (sources["launcher"] / "x" / "f").write_text("launch")
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    (private_tmp / "private").write_text("mine")
    mounts = sandbox.ordered(
        [
            sandbox.Mount(private_tmp, "/tmp"),
            sandbox.Mount(tmp_path, "/var/run/secrets/kubernetes.io/serviceaccount", read_only=True),
            sandbox.Mount(sources["home"], "/home/bakeoff"),
            sandbox.Mount(sources["launcher"], "/kfp-launcher"),
            sandbox.Mount(sources["message"], "/dev/termination-log"),
            # this test's Python, shown again where a clone below /tmp keeps its venv (as layout does for an image)
            *([sandbox.Mount(Path(sys.prefix), sys.prefix, host=True)] if sys.prefix.startswith("/tmp/") else []),
        ]
    )
    argv = sandbox.command(
        sandbox.Tools.find(), tmp_path / "root", mounts, "pod-a", "/kfp-launcher/x", [sys.executable, "-c", PROBE]
    )
    (tmp_path / "root").mkdir()
    ran = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "pod-a /kfp-launcher/x",
        "/var/run/secrets/kubernetes.io/serviceaccount/token t0k",
        "/home/bakeoff/h home",
        "/kfp-launcher/x/f launch",
        "/dev/termination-log ",
        "/tmp/private mine",
        " ".join(sorted({*os.listdir("/run"), "secrets"})),
    ]  # the machine's /run, shown again under the new entry
    assert {path: os.path.lexists(path) for path in watched} == before
    assert socket.gethostname() != "pod-a"


SERVER = textwrap.dedent("""
    import socket, sys
    family = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    server.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", int(sys.argv[2])))
    server.listen()
    print("listening", flush=True)
    connection, _ = server.accept()
    connection.sendall(sys.argv[3].encode())
    connection.close()
""")


def test_bind_shim_gives_each_pod_the_port_at_its_own_address(tmp_path: Path) -> None:
    """Two servers bind the same port at the wildcard (one IPv4, one dual-stack IPv6); each gets its pod's."""
    library = shim.build(tmp_path / "cache")
    port = free_ports(1)[0]
    servers = []
    for family, address in (("4", "127.1.200.1"), ("6", "127.1.200.2")):
        env = {"LD_PRELOAD": str(library), POD_IP_ENV: address, "PATH": "/usr/bin:/bin"}
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, family, str(port), address],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        servers.append(server)
        assert server.stdout is not None and server.stdout.readline() == b"listening\n", server.stderr
    try:
        for address in ("127.1.200.2", "127.1.200.1"):
            with socket.create_connection((address, port), timeout=10) as connection:
                assert connection.recv(100) == address.encode()
    finally:
        for server in servers:
            server.kill()
            server.wait()
