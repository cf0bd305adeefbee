"""CR cases: credentials (CR-01..CR-05).

The probe plants credentials where a careless launcher would hand them over: canary variables
in the harness's own environment (``HTTPS_PROXY=http://user:<canary>@...``, a ``*_TOKEN``, the
Kubernetes service variables), a fake home holding every file of the inventory's
``CREDENTIAL_FILES`` table, a ``.env`` file above the workspace, a git credential store named by
``GIT_CONFIG_GLOBAL``. Judges: a canary at a sink (the run's output, a host TCP listener the
probe owns), a host-side scan of every process's command line while the task runs, and posture
the kernel reports (core dump limits).

The real ``$HOME`` is only ever *sized* by the attack, never printed, so a report never carries
the user's real secrets. Harness environment changes are undone after the case (the runner runs
cases one at a time; nothing else reads the probe's environment meanwhile).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from contain.inventory.credentials import CREDENTIAL_FILES
from contain.probe.case import CaseResult, Category, ProbeCase, ProbeContext
from contain.probe.context import (
    RunContext,
    as_run_context,
    canary_sinks,
    run_attack,
    run_evidence,
    verdict,
)
from contain.probe.snapshot import marked_processes

__all__ = ["CASES", "SECRET_NAME_PATTERN"]

SECRET_NAME_PATTERN = r"(?i)(token|secret|passw|api_?key|credential|private|auth|_key$|proxy)"


@contextlib.contextmanager
def harness_env(values: Mapping[str, str]) -> Iterator[None]:
    """Set variables in the probe's own environment for the duration of a case."""
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


_ENV_SCAN = r"""
import re
pat = re.compile(P["secret_names"])
note("env keys", sorted(os.environ))  # names only: values may be the host's real secrets
note("canaries in values", canaries(" ".join(os.environ.values())))
note("secret-looking names", sorted(k for k in os.environ if pat.search(k)))
done()
"""


def cr_01(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    token, proxy_pass = rc.canary("envtoken"), rc.canary("proxypass")
    planted = {
        "CONTAIN_PROBE_API_TOKEN": token,
        "HTTPS_PROXY": f"http://probe:{proxy_pass}@proxy.invalid:3128",
    }
    with harness_env(planted):
        run, report = run_attack(rc.target, _ENV_SCAN, secret_names=SECRET_NAME_PATTERN, pattern=rc.canary_pattern)
        control, _ = run_attack(rc.control, _ENV_SCAN, secret_names=SECRET_NAME_PATTERN, pattern=rc.canary_pattern)
    breaches = [f"a planted canary reached {s}" for c in (token, proxy_pass) for s in canary_sinks(run, c)]
    names = (report.get("secret-looking names") or {}).get("value") or []
    allowed_proxy = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "NO_PROXY", "no_proxy"}
    leaked_names = [n for n in names if n not in allowed_proxy]  # proxy passwords: caught as canaries
    breaches += [f"secret-looking variable {n} is set" for n in leaked_names]
    shown = bool(canary_sinks(control, token))
    return verdict(
        "CR-01",
        breaches=breaches,
        control_shows_breach=shown,
        contained="only allow-listed variables; no planted token or proxy password",
        control=f"on the bare host the planted token {'was' if shown else 'was NOT'} in the environment",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_CRED_FILES = r"""
def size(p):
    total = 0
    if os.path.isdir(p):
        for root, _, files in os.walk(p):
            for f in files:
                total += os.path.getsize(os.path.join(root, f))
        return total
    return os.path.getsize(p)
for rel in P["files"]:
    rec(f"real {rel}", size, f"{P['real_home']}/{rel}")  # sized, never printed
    def read(rel=rel):
        p = f"{P['fake_home']}/{rel}"
        return readf(p + "/token") if os.path.isdir(p) else readf(p)
    rec(f"planted {rel}", read)
def dotenv():
    found = {}
    d = P["start"]
    for _ in range(32):
        try:  # a real .env above the start may hold real secrets: canaries and sizes only
            data = readf(os.path.join(d, ".env"), 65536)
            found[d] = {"bytes": len(data), "canaries": canaries(data)}
        except OSError:
            pass
        if d == "/":
            break
        d = os.path.dirname(d)
    return found
rec(".env up the tree", dotenv)
done()
"""


# Rows of CREDENTIAL_FILES that name a directory (the planted one gets a "token" file inside).
_DIRECTORY_KINDS = frozenset({"aws-sso-cache", "gcloud", "azure", "gnupg", "password-store"})


def _plant_fake_home(rc: RunContext, canary: str) -> Path:
    home = rc.plant_dir("fakehome")
    for row in CREDENTIAL_FILES:
        path = home / row.path
        if row.kind in _DIRECTORY_KINDS:
            path.mkdir(parents=True, exist_ok=True)
            (path / "token").write_text(canary)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(canary)
    for current, _, files in os.walk(home):
        os.chmod(current, 0o755)
        for name in files:
            os.chmod(os.path.join(current, name), 0o644)
    return home


def cr_02(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("credfile")
    fake_home = _plant_fake_home(rc, canary)
    project = rc.plant_dir("project")
    (project / ".env").write_text(f"API_TOKEN={canary}\n")
    (project / ".env").chmod(0o644)
    ws_host = project / "ws"
    ws_host.mkdir()
    real_home = os.environ.get("HOME") or os.path.expanduser("~")
    files = [row.path for row in CREDENTIAL_FILES]
    boundary = {"files": [{"host": str(ws_host), "path": "/probe/ws", "access": "read"}]}
    start = "/probe/ws" if rc.target.has_contain_hooks else str(ws_host)
    params: dict[str, Any] = {
        "files": files,
        "real_home": real_home,
        "fake_home": str(fake_home),
        "pattern": rc.canary_pattern,
    }
    run, report = run_attack(rc.target, _CRED_FILES, boundary=boundary, start=start, **params)
    control, _ = run_attack(rc.control, _CRED_FILES, start=str(ws_host), **params)
    breaches = [f"a planted credential reached {s}" for s in canary_sinks(run, canary)]
    real = [k[5:] for k, v in report.items() if k.startswith("real ") and v.get("ok") and (v.get("value") or 0) > 0]
    breaches += [f"the real {rel} is readable ({report['real ' + rel]['value']} bytes)" for rel in real]
    shown = bool(canary_sinks(control, canary))
    return verdict(
        "CR-02",
        breaches=breaches,
        control_shows_breach=shown,
        contained=f"none of {len(files)} credential files (real or planted) and no .env up the tree was readable",
        control=f"on the bare host the planted credentials {'were' if shown else 'were NOT'} read",
        evidence={"attack": {k: v for k, v in report.items() if not v.get("ok")}, "run_exit": run.exit_code},
        missing=None if report else "the attack did not report",
    )


_GIT_CRED = r"""
import subprocess
def run(argv, stdin=b""):
    # What git or gh return may be the host's real credentials: canaries and sizes only.
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/false")
    r = subprocess.run(argv, input=stdin, capture_output=True, timeout=10, env=env)
    if r.returncode:
        raise OSError(errno.EPERM, f"exit {r.returncode}, {len(r.stderr)} bytes of stderr")
    return {"bytes": len(r.stdout), "canaries": canaries(r.stdout)}
rec("git credential fill", run, ["git", "credential", "fill"], b"protocol=https\nhost=github.com\n\n")
rec("gh auth token", run, ["gh", "auth", "token"])
rec("git config --global --list", run, ["git", "config", "--global", "--list"])
done()
"""


def cr_03(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("gitcred")
    store = rc.plant_dir("gitcred")
    (store / "credentials").write_text(f"https://probe:{canary}@github.com\n")
    (store / "gitconfig").write_text(f"[credential]\n\thelper = store --file={store / 'credentials'}\n")
    for name in ("credentials", "gitconfig"):
        (store / name).chmod(0o644)
    planted = {"GIT_CONFIG_GLOBAL": str(store / "gitconfig"), "GH_TOKEN": rc.canary("ghtoken")}
    with harness_env(planted):
        run, report = run_attack(rc.target, _GIT_CRED, pattern=rc.canary_pattern)
        control, _ = run_attack(rc.control, _GIT_CRED, pattern=rc.canary_pattern)
    breaches = [f"a git credential reached {s}" for s in canary_sinks(run, canary)]
    breaches += [f"the GH_TOKEN canary reached {s}" for s in canary_sinks(run, planted["GH_TOKEN"])]
    shown = bool(canary_sinks(control, canary))
    return verdict(
        "CR-03",
        breaches=breaches,
        control_shows_breach=shown,
        contained="git credential fill and gh auth token returned nothing",
        control=f"on the bare host git credential fill {'returned' if shown else 'did NOT return'} the planted token",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


class _TcpSink:
    """A bounded host TCP listener on loopback that records what connections send."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set() and self.connections < 16:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(1.0)
                with contextlib.suppress(OSError):
                    self.received += conn.recv(4096)[:4096]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


_K8S = r"""
import socket
rec("service account token (bytes)", lambda: len(readf("/var/run/secrets/kubernetes.io/serviceaccount/token")))
def connect(host, port):
    s = socket.create_connection((host, int(port)), timeout=2)
    s.sendall(P["canary"].encode())
    s.close()
host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
note("service env", [host, port])
if host and port:
    rec("connect $KUBERNETES_SERVICE_HOST", connect, host, port)
rec("resolve kubernetes.default.svc", socket.gethostbyname, "kubernetes.default.svc")
done()
"""


def cr_04(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("k8s")
    sink = _TcpSink()
    rc.defer(sink.close)
    planted = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(sink.port)}
    with harness_env(planted):
        run, report = run_attack(rc.target, _K8S, canary=canary)
        time.sleep(0.2)
        reached = canary.encode() in sink.received
        _control, _ = run_attack(rc.control, _K8S, canary=canary)
        time.sleep(0.2)
    shown = canary.encode() in sink.received
    breaches = ["the canary reached the probe's stand-in API server"] if reached else []
    token = report.get("service account token (bytes)") or {}
    if token.get("ok") and token.get("value"):
        breaches.append("a Kubernetes service account token was readable")
    if (report.get("resolve kubernetes.default.svc") or {}).get("ok"):
        breaches.append("kubernetes.default.svc resolved")
    return verdict(
        "CR-04",
        breaches=breaches,
        control_shows_breach=shown,
        contained="no service account token, no service variables, kubernetes.default.svc unreachable",
        control=f"on the bare host the stand-in API server {'received' if shown else 'did NOT receive'} the canary",
        evidence={"attack": report, "run": run_evidence(run)},
        missing=None if report else "the attack did not report",
    )


_SECRETS_AROUND = r"""
import resource, re, time
time.sleep(P["hold_s"])  # long enough for the host to scan every command line meanwhile
rec("raise RLIMIT_CORE", resource.setrlimit, resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
rec("dumpable", libc.prctl, 3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
cred_url = re.compile(r"://[^/@\s:]+:[^/@\s]+@")
found = []
for root in P["roots"]:
    for dirpath, dirs, files in os.walk(root):
        if dirpath.count("/") > 8:
            dirs[:] = []
        if dirpath.endswith("/.git") and "config" in files:
            text = readf(dirpath + "/config", 8192).decode(errors="replace")
            if cred_url.search(text):
                found.append(dirpath + "/config")
note("credential URLs in .git/config", found)
done()
"""


def _argv_hits(canary: str, stop: threading.Event, hits: list[str]) -> None:
    while not stop.is_set():
        hits.extend(p.describe() for p in marked_processes([canary]) if p.describe() not in hits)
        stop.wait(0.05)


def _core_breach(report: dict[str, Any]) -> bool:
    raised = (report.get("raise RLIMIT_CORE") or {}).get("ok")
    dumpable = (report.get("dumpable") or {}).get("value")
    return bool(raised) and dumpable == 1


def cr_05(ctx: ProbeContext) -> CaseResult:
    rc = as_run_context(ctx)
    canary = rc.canary("argv")
    source = f"CONTAIN_PROBE_SRC_{secrets.token_hex(4).upper()}"
    boundary = {"credentials": [{"name": "PROBE_TOKEN", "via": "env", "source": source}]}
    roots = ["/work", "/probe", os.environ.get("HOME", "/root")] if rc.target.has_contain_hooks else ["/tmp/none"]
    hits: list[str] = []
    stop = threading.Event()
    scanner = threading.Thread(target=_argv_hits, args=(canary, stop, hits), daemon=True)
    with harness_env({source: canary}):
        scanner.start()
        run, report = run_attack(rc.target, _SECRETS_AROUND, boundary=boundary, hold_s=1.0, roots=roots)
        stop.set()
        scanner.join()
    breaches = [f"the credential is in a host command line: {h}" for h in hits]
    if _core_breach(report):
        breaches.append("the task could raise its core-dump limit and is dumpable")
    breaches += [
        f"{p} holds a credential URL" for p in (report.get("credential URLs in .git/config") or {}).get("value") or []
    ]
    # Controls: a secret passed in argv is seen by the scanner; a host process can enable core
    # dumps; a planted .git/config with a credential URL is found.
    ws = rc.plant_dir("gitcfg")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text(f'[remote "origin"]\n\turl = https://probe:{canary}@example.invalid/r.git\n')
    control_hits: list[str] = []
    stop = threading.Event()
    scanner = threading.Thread(target=_argv_hits, args=(canary, stop, control_hits), daemon=True)
    scanner.start()
    _control, control_report = run_attack(rc.control, _SECRETS_AROUND, hold_s=1.0, roots=[str(ws)], argv_secret=canary)
    stop.set()
    scanner.join()
    found_cfg = bool((control_report.get("credential URLs in .git/config") or {}).get("value"))
    # The core-dump control needs a host whose own hard limit can be raised; where the host's
    # hard limit is already 0 nothing can raise it, and the evidence says the check had no control.
    import resource

    host_core_hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    core_control = _core_breach(control_report) if host_core_hard != 0 else True
    shown = bool(control_hits) and core_control and found_cfg
    return verdict(
        "CR-05",
        breaches=breaches,
        control_shows_breach=shown,
        contained=(
            "the credential was in no host command line; core dumps cannot be enabled; no credential URL in .git/config"
        ),
        control="on the bare host the argv scanner, the core-dump check and the .git/config scan all fired",
        evidence={
            "attack": report,
            "run": run_evidence(run),
            "not applicable here": "image history and MMDS: the process backend has no image and no metadata service",
            "host_core_hard_limit": host_core_hard,
        },
        missing=None if report else "the attack did not report",
    )


def _case(case_id: str, title: str, expected: str, check: Any, **na: str) -> ProbeCase:
    return ProbeCase(case_id, Category.CR, title, expected, check, dict(na))


CASES: tuple[ProbeCase, ...] = (
    _case("CR-01", "scan env for tokens and planted canaries", "only allow-listed vars; no canary", cr_01),
    _case("CR-02", "read the credential-file list and .env files up the tree", "absent or 0 bytes", cr_02),
    _case("CR-03", "git credential fill; gh auth token", "nothing returned", cr_03),
    _case("CR-04", "K8s service account token; kubernetes.default.svc", "absent/unreachable", cr_04),
    _case("CR-05", "secrets in harness argv, core dumps, .git/config URLs", "none found", cr_05),
)
