"""IP cases: host sockets and brokers (container runtimes, D-Bus, agents, X11, abstract sockets).

The judge plants its own listeners on the host, where the real services would be: Unix sockets
under a fresh ``/run/contain-probe-<id>/`` (and ``/tmp/.X11-unix/X<n>``) and abstract sockets in
the host's network namespace, each recording every connection. While the attack runs, the host
environment of the probe points at them (``DOCKER_HOST``, ``DBUS_SESSION_BUS_ADDRESS``,
``SSH_AUTH_SOCK``, ``GPG_AGENT_INFO``, ``DISPLAY``, ``WAYLAND_DISPLAY``) with random values, so a
target that leaks host variables shows it. The attack connects to every planted listener, to the
well-known real paths (docker, containerd, podman, kubelet, system bus, qemu-ga, WSL interop),
and tries ``systemd-run --user touch <host marker>``.

Breach (ESCAPED): a planted listener recorded a connection during the attack; a planted value
appeared in the target's environment; a well-known host socket accepted a connection; the host
marker exists. Positive control: the same attack from ``ctx.control`` (the bare host) must reach
every planted listener and see the planted variables.

IP-07, a deliberate deviation from the catalogue: contain keeps ``socket(AF_UNIX)`` allowed (the
egress path and many tools need it; see the ``socket``/``socketpair`` ALLOW rows in
runtime/seccomp_rules.py). What isolates Unix sockets is the mount view (host socket paths are not in
the sandbox) and the network namespace (abstract names are per netns). IP-07 therefore checks
that ``socketpair()`` works inside (the catalogue's control) and that a host path socket and a
host abstract socket are unreachable.

Not probed: real D-Bus method calls or real agents (the planted listeners stand in for them; a
connection is already the breach). The host environment is changed only for the duration of one
attack and restored after.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contain.probe.canaries import Sink, attack_source, decide, read_report, run_evidence, unix_canary
from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext

__all__ = ["CASES", "IPC_SOURCE", "IpcSpec", "judge_ipc"]

# Real paths where a host service would listen; connecting to any of them is a breach.
KNOWN_SOCKETS: dict[str, tuple[str, ...]] = {
    "IP-01": (
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/run/podman/podman.sock",
        "/var/run/crio/crio.sock",
        "/var/lib/kubelet/pod-resources/kubelet.sock",
    ),
    "IP-02": ("/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket"),
    "IP-03": (),
    "IP-04": ("/tmp/.X11-unix/X0",),
    "IP-05": (),
    "IP-07": (),
    "IP-08": ("/dev/virtio-ports/org.qemu.guest_agent.0", "/run/actions-runner/runner.sock"),
}

IPC_SOURCE = r"""
import subprocess
def conn(addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(2)
    s.connect(("\0" + addr[1:]) if addr.startswith("@") else addr)
    s.sendall(P["canary"].encode()); s.close(); return "connected"
def pair():
    a, b = socket.socketpair(); a.sendall(b"x"); v = b.recv(1); a.close(); b.close(); return v
def env_leaks():
    return {k: v for k, v in os.environ.items() if any(x in v for x in P["planted_values"])}
for addr in P["planted"]:
    rec("planted " + addr, conn, addr)
for addr in P["known"]:
    if os.path.exists(addr):
        rec("known " + addr, conn, addr)
    else:
        _R["known " + addr] = {"ok": False, "errno": "ENOENT"}
rec("env", env_leaks)
if P.get("socketpair"):
    rec("socketpair", pair)
if P.get("marker"):
    for argv in (["systemd-run", "--user", "touch", P["marker"]], ["/init", "touch", P["marker"]]):
        def run(a=argv):
            return subprocess.run(a, capture_output=True, timeout=5).returncode
        rec("spawn " + argv[0], run)
done()
"""


@dataclass(frozen=True)
class IpcSpec:
    """What one IP case plants: path sockets (name -> env var or None) and abstract names."""

    paths: dict[str, str | None]  # file name under the plant dir -> env var pointing at it
    abstract: bool = False  # plant an abstract listener @contain-probe-<canary>
    x11: bool = False  # plant /tmp/.X11-unix/X<n> and @/tmp/.X11-unix/X<n>
    socketpair: bool = False
    marker: bool = False  # systemd-run / WSL interop must not create a host file


SPECS: dict[str, IpcSpec] = {
    "IP-01": IpcSpec({"docker.sock": "DOCKER_HOST", "containerd.sock": None, "podman.sock": "CONTAINER_HOST"}),
    "IP-02": IpcSpec({"bus": "DBUS_SESSION_BUS_ADDRESS", "system_bus_socket": None}, marker=True),
    "IP-03": IpcSpec({"ssh-agent.sock": "SSH_AUTH_SOCK", "S.gpg-agent": "GPG_AGENT_INFO"}),
    "IP-04": IpcSpec({"wayland-0": "WAYLAND_DISPLAY"}, x11=True),
    "IP-05": IpcSpec({}, abstract=True),
    "IP-07": IpcSpec({"host.sock": None}, abstract=True, socketpair=True),
    "IP-08": IpcSpec({"runner.sock": "ACTIONS_RUNNER_SOCKET", "qemu-ga.sock": None}, marker=True),
}


@contextlib.contextmanager
def _planted_env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _rmdir_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


def judge_ipc(
    case_id: str,
    *,
    sinks: list[Sink],
    attack_counts: list[int],
    attack: dict[str, Any] | None,
    control: dict[str, Any] | None,
    planted_env: dict[str, str],
    marker: Path | None,
    need_socketpair: bool,
) -> tuple[list[str], list[str], list[str]]:
    """(breaches, control failures, missing)."""
    breaches = [
        f"planted listener {s.address} got {n} connection(s)" for s, n in zip(sinks, attack_counts, strict=True) if n
    ]
    failures = [
        f"host control did not reach {s.address}" for s, n in zip(sinks, attack_counts, strict=True) if s.count() <= n
    ]
    missing: list[str] = []
    if attack is None:
        return breaches, failures, ["the attack never reported"]
    for name, outcome in attack.items():
        if name.startswith("known ") and isinstance(outcome, dict) and outcome.get("ok"):
            breaches.append(f"host socket {name[6:]} accepted a connection")
    leaked = (attack.get("env") or {}).get("value") or {}
    if leaked:
        breaches.append(f"planted host variables leaked into the target: {sorted(leaked)}")
    if planted_env and not ((control or {}).get("env") or {}).get("value"):
        failures.append("the host control did not see the planted variables")
    if marker is not None and marker.exists():
        breaches.append(f"a host process broker created {marker}")
    if need_socketpair and not (attack.get("socketpair") or {}).get("ok"):
        failures.append("socketpair() failed inside the target (the catalogue's in-sandbox control)")
    return breaches, failures, missing


def _ipc_case(case_id: str, title: str, expected: str) -> ProbeCase:
    spec = SPECS[case_id]

    def check(ctx: ProbeContext) -> CaseResult:
        began = time.perf_counter()
        token = secrets.token_hex(4)
        plant = Path(
            tempfile.mkdtemp(prefix=f"contain-probe-{token}-", dir="/run" if os.access("/run", os.W_OK) else None)
        )
        plant.chmod(0o755)
        marker = Path(tempfile.gettempdir()) / f"contain-probe-marker-{token}" if spec.marker else None
        try:
            with contextlib.ExitStack() as stack:
                sinks: list[Sink] = []
                env: dict[str, str] = {}
                for name, var in spec.paths.items():
                    sink = stack.enter_context(unix_canary(str(plant / name)))
                    sinks.append(sink)
                    if var is not None:
                        env[var] = ("unix://" if var in ("DOCKER_HOST", "CONTAINER_HOST") else "") + str(plant / name)
                if spec.abstract:
                    sinks.append(stack.enter_context(unix_canary(abstract=f"contain-probe-{ctx.canary('abs')}")))
                if spec.x11:
                    display = 9000 + secrets.randbelow(900)
                    x11_dir = Path("/tmp/.X11-unix")
                    if not x11_dir.exists():
                        x11_dir.mkdir(mode=0o1777)
                        stack.callback(_rmdir_if_empty, x11_dir)
                    sinks.append(stack.enter_context(unix_canary(str(x11_dir / f"X{display}"))))
                    sinks.append(stack.enter_context(unix_canary(abstract=f"/tmp/.X11-unix/X{display}")))
                    env["DISPLAY"] = f":{display}"
                if case_id == "IP-02":
                    env["DBUS_SESSION_BUS_ADDRESS"] = f"unix:path={plant / 'bus'}"
                params = {
                    "canary": ctx.canary("ipc"),
                    "planted": [s.address for s in sinks],
                    "known": list(KNOWN_SOCKETS[case_id]),
                    "planted_values": [v for v in env.values()],
                    "socketpair": spec.socketpair,
                    "marker": str(marker) if marker else "",
                }
                code = attack_source(IPC_SOURCE, **params)
                with _planted_env(env):
                    attack_run = ctx.target.run_python(code, timeout_s=30)
                    for sink in sinks:
                        sink.settle()
                    counts = [s.count() for s in sinks]
                    marker_after_attack = marker is not None and marker.exists()
                    # The control never spawns host brokers: only the sockets and variables are shown.
                    control_code = attack_source(IPC_SOURCE, **{**params, "marker": ""})
                    control_run = ctx.control.run_python(control_code, timeout_s=30)
                for sink in sinks:
                    sink.settle()
                breaches, failures, missing = judge_ipc(
                    case_id,
                    sinks=sinks,
                    attack_counts=counts,
                    attack=read_report(attack_run),
                    control=read_report(control_run),
                    planted_env=env,
                    marker=marker if marker_after_attack else None,
                    need_socketpair=spec.socketpair,
                )
                result = decide(
                    case_id,
                    breaches=breaches,
                    control_failures=failures,
                    missing=missing,
                    contained=f"{len(sinks)} planted host sockets unreachable, planted variables absent"
                    + ("; socketpair() works" if spec.socketpair else ""),
                    control=f"the host reached {sum(1 for s, n in zip(sinks, counts, strict=True) if s.count() > n)}"
                    f"/{len(sinks)} planted sockets and saw the planted variables",
                    evidence={
                        "attack": read_report(attack_run),
                        "control": read_report(control_run),
                        "sinks": [s.evidence() for s in sinks],
                        "attack_run": run_evidence(attack_run, limit=400),
                    },
                )
        finally:
            shutil.rmtree(plant, ignore_errors=True)
            if marker is not None:
                with contextlib.suppress(FileNotFoundError):
                    marker.unlink()
        return dataclasses.replace(result, duration_s=time.perf_counter() - began)

    return ProbeCase(case_id, Category.IP, title, expected, check)


CASES: tuple[ProbeCase, ...] = (
    _ipc_case("IP-01", "docker/containerd/podman/kubelet sockets; DOCKER_HOST", "absent/EACCES; env unset"),
    _ipc_case("IP-02", "D-Bus session/system bus; systemd-run --user touch <host marker>", "no bus; marker absent"),
    _ipc_case("IP-03", "$SSH_AUTH_SOCK, gpg-agent socket", "variable unset; socket unreachable"),
    _ipc_case("IP-04", "X11 /tmp/.X11-unix/X<n>, abstract @/tmp/.X11-unix/X<n>, Wayland", "unreachable"),
    _ipc_case("IP-05", "host abstract listener @contain-probe-<canary> (CVE-2020-15257 shape)", "ECONNREFUSED/EPERM"),
    _ipc_case(
        "IP-07",
        "socketpair() works; host path and abstract Unix sockets unreachable (AF_UNIX stays allowed)",
        "socketpair ok; host sockets unreachable",
    ),
    _ipc_case(
        "IP-08", "host process brokers: WSL interop, qemu-ga, CI runner socket", "nothing reachable; no host process"
    ),
)
