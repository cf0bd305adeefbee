"""A Ray cluster on this machine for one run: ``contain fleet run --address local``, tests, bench.

Each node is a ``ray start --block`` process started in its own session, with its own temp
directory, on 127.0.0.1, with a small object store and the ``contain_backend_*`` resources this
host's facts allow (``placement.plan_node_resources``). Ray's processes for a node (GCS, raylet,
agents, workers) stay in that session, so ``kill_node`` and ``stop`` end exactly that node's
processes (SIGTERM, then SIGKILL after a grace period) and never another cluster's; ``ray stop``
would end every Ray process of the user on the machine. ``stop`` returns the pids that survived
(none is expected; a caller reports any).

Authentication: each cluster gets a token of its own (32 random bytes, hex, in a 0600 file in
its 0700 root directory), and its nodes and this driver run with Ray's token authentication on
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``): a local user who can reach the loopback ports
but not the file cannot submit work. The driver's process keeps those two variables after the
cluster stopped (the next ``LocalCluster`` replaces them). Never the user's ``~/.ray/auth_token``:
its presence would otherwise decide whether a node runs with authentication.

Node death is detected quickly here (``_SYSTEM_CONFIG``): the GCS checks each raylet every 500
ms and declares it dead after 3 missed checks, so a killed node's jobs are retried within
seconds instead of Ray's default half minute.

Not a production deployment: one machine, loopback only, no authentication between nodes
beyond what Ray itself does. A driver killed outright (SIGKILL, or SIGTERM without a handler)
cannot stop its nodes: they keep running in their sessions, named by their temp directory
(``/tmp/cf-*``), until killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from contain._log import LazyLogger
from contain.errors import SandboxStartError

__all__ = ["LocalCluster", "session_members"]

log = LazyLogger(__name__)

# health_check_*: how fast the GCS declares a silent raylet dead (500 ms x 3 instead of Ray's
# 3 s x 5 defaults); the fleet's retry waits on that declaration.
_SYSTEM_CONFIG = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_timeout_ms": 500}
_OBJECT_STORE_BYTES = 100 * 1000 * 1000  # Ray's floor is about 75 MB; results are small
_START_TIMEOUT_S = 120.0
_SHUTDOWN_S = 30.0
_STOP_GRACE_S = 3.0  # then SIGKILL: a node of a throwaway cluster has nothing to save


def session_members(sid: int) -> list[int]:
    """Pids of every process in session ``sid`` (from /proc/<pid>/stat, field 6)."""
    members: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 3 and fields[0] != b"Z" and int(fields[3]) == sid:
            members.append(int(entry))
    return members


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        raise SandboxStartError("the `ray` command is not installed", "pip install 'contain[fleet]'")
    return found


@dataclass
class _LocalNode:
    index: int
    process: subprocess.Popen[bytes]
    temp_dir: Path
    node_id: str | None = None


class LocalCluster:
    """Start ``nodes`` Ray nodes here; ``address`` connects to them. Use as a context manager.

    Args:
        nodes: how many (the first is the head).
        num_cpus: CPUs each node tells Ray it has (Ray's own tasks; sandboxes use the resources below).
        resources: the custom resources each node advertises (default: this host's facts), or
            one mapping per node (the head first), e.g. to offer a backend on one node only.
        root: where the nodes' temp directories go (default: a new directory under /tmp; Ray's
            socket paths must stay under 108 bytes).
    """

    def __init__(
        self,
        *,
        nodes: int = 1,
        num_cpus: int = 1,
        resources: Mapping[str, float] | Sequence[Mapping[str, float]] | None = None,
        root: Path | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        if resources is not None and not isinstance(resources, Mapping) and len(resources) != nodes:
            raise ValueError(f"resources names {len(resources)} nodes, the cluster has {nodes}")
        self._count = nodes
        self._num_cpus = num_cpus
        self._resources = resources
        self._root = root
        self._own_root = root is None
        self.port = 0
        self.nodes: list[_LocalNode] = []
        self._auth_env: dict[str, str] = {}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the nodes and wait until Ray sees them all alive.

        Raises:
            SandboxStartError: a node did not come up (its log is named).
        """
        if self._resources is None:
            from contain.fleet.placement import gather_node_facts, plan_node_resources

            self._resources = plan_node_resources(gather_node_facts())
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="cf-", dir="/tmp"))
        self._auth_env = _write_token(self._root)
        self.port = _free_port()
        try:
            for index in range(self._count):
                self.nodes.append(self._start_node(index))
                self._wait_for_nodes(index + 1)
        except BaseException:
            self.stop()
            raise

    def _resources_of(self, index: int) -> dict[str, float]:
        assert self._resources is not None
        chosen = self._resources if isinstance(self._resources, Mapping) else self._resources[index]
        return dict(chosen)

    def _start_node(self, index: int) -> _LocalNode:
        assert self._root is not None and self._resources is not None
        temp_dir = self._root / f"n{index}"
        temp_dir.mkdir(mode=0o700)
        argv = [
            _ray_executable(), "start", "--block", "--disable-usage-stats",
            "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}",
            f"--num-cpus={self._num_cpus}", f"--object-store-memory={_OBJECT_STORE_BYTES}",
            f"--resources={json.dumps(self._resources_of(index))}",
        ]
        if index == 0:
            argv += ["--head", f"--port={self.port}", "--include-dashboard=false",
                     f"--system-config={json.dumps(_SYSTEM_CONFIG)}"]
        else:
            argv += [f"--address={self.address}"]
        log_file = open(temp_dir / "ray-start.log", "wb")  # noqa: SIM115 - the child holds it; closed below
        try:
            process = subprocess.Popen(
                argv, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **self._auth_env},
            )
        finally:
            log_file.close()
        return _LocalNode(index, process, temp_dir)

    def _wait_for_nodes(self, count: int) -> None:
        from contain.fleet.ray_nodes import _ray

        ray = _ray()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.process.poll() is not None:
                    raise SandboxStartError(
                        f"ray node {node.index} exited with {node.process.returncode} while starting",
                        f"read {node.temp_dir / 'ray-start.log'}",
                    )
            if not ray.is_initialized():
                _use_token_in_this_process(self._auth_env)
                try:
                    ray.init(address=self.address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
                except (ConnectionError, RuntimeError):
                    time.sleep(0.2)
                    continue
            alive = [n for n in ray.nodes() if n.get("Alive")]
            if len(alive) >= count:
                self._name_nodes(alive)
                return
            time.sleep(0.2)
        raise SandboxStartError(
            f"{count} ray nodes did not come up within {_START_TIMEOUT_S:.0f}s", f"read the logs under {self._root}"
        )

    def _name_nodes(self, alive: list[dict[str, object]]) -> None:
        """Match Ray's node ids to our nodes by the temp directory in each raylet's socket path."""
        for node in self.nodes:
            for info in alive:
                if str(info.get("RayletSocketName", "")).startswith(str(node.temp_dir) + "/"):
                    node.node_id = str(info["NodeID"])

    def kill_node(self, index: int) -> None:
        """SIGKILL every process of node ``index`` at once, as a machine that loses power."""
        node = self.nodes[index]
        for pid in session_members(node.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.process.wait(timeout=30)

    def stop(self) -> list[int]:
        """Disconnect, end every node's processes, remove the temp directories; returns survivors.

        The disconnect is bounded (``_SHUTDOWN_S``): a Ray client stuck on a dead node must not
        keep the nodes' processes alive, so they are ended whether or not it returned.
        """
        with contextlib.suppress(SandboxStartError):
            from contain.fleet.ray_nodes import _ray

            ray = _ray()
            if ray.is_initialized():
                disconnect = threading.Thread(target=ray.shutdown, name="contain-fleet-ray-shutdown", daemon=True)
                disconnect.start()
                disconnect.join(_SHUTDOWN_S)
                if disconnect.is_alive():
                    log.warning("ray.shutdown() did not return within %ss; ending the nodes anyway", _SHUTDOWN_S)
        survivors: list[int] = []
        for node in reversed(self.nodes):  # workers first, the head (GCS) last
            survivors += _end_session(node.process)
        if self._root is not None and self._own_root and not survivors:
            shutil.rmtree(self._root, ignore_errors=True)
        self.nodes = []
        return survivors


def _write_token(root: Path) -> dict[str, str]:
    """A fresh token in ``root`` (0600, created exclusively); the environment that makes Ray use it."""
    path = root / "auth_token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}


def _use_token_in_this_process(auth_env: dict[str, str]) -> None:
    """Make this process's Ray client send the cluster's token (read from the environment by Ray's
    config and its cached token loader, both refreshed here, before ``ray.init``)."""
    import ray._raylet as raylet  # Ray 2.60's compiled module: no type stubs for these two names

    os.environ.update(auth_env)
    raylet.Config.initialize("")  # type: ignore[attr-defined]
    raylet.AuthenticationTokenLoader.instance().reset_cache()  # type: ignore[attr-defined]


def _end_session(process: subprocess.Popen[bytes]) -> list[int]:
    sid = process.pid
    for sig, grace in ((signal.SIGTERM, _STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        members = session_members(sid)
        if not members:
            break
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while session_members(sid) and time.monotonic() < deadline:
            if process.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=0.1)
            else:
                time.sleep(0.1)
    if process.poll() is None:
        process.wait(timeout=5)
    return session_members(sid)
