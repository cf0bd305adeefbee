"""The probe's run context, and the helpers every case uses to attack and to judge.

``RunContext`` implements ``ProbeContext``: the target under test, the bare-host control target,
a relaxed-but-bounded contain target for controls that would be unsafe on the host, the run id,
and fresh canaries. It also plants what judges look for (canary files in a host directory or in
the real ``$HOME``, write-bound judge directories) and removes every planted thing after the case
(``run_deferred``).

Attack code is python3 source. ``attack(body)`` prepends ``ATTACK_PRELUDE``, which gives the body
``rec(name, fn, *args)`` (records the outcome of one operation: the value or the errno name),
``sysc(nr, *args)`` (a raw syscall through ctypes that raises OSError) and ``done()`` (prints the
record as one ``@@PROBE@@`` line) and ``canaries(text)`` (only this run's canary values found in
``text``: attacks that read what may hold the host's real secrets, such as another process's
environment, print nothing else). ``attack_report(run)`` reads the record back.

How verdicts are reached (``verdict``): a breach seen by an outside judge is ESCAPED whatever
else happened; otherwise a positive control that failed to show the breach makes the case
INCONCLUSIVE; only then is it CONTAINED. What the attacker prints is evidence of what the kernel
answered; it is never enough to call a case CONTAINED on its own where a host-side judge exists
(canary at a sink, marker on the host, process in host /proc).

Not enforced here: cleaning up after a case that crashed the harness itself (the planted files
carry the run id so a later run or a human can find them).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contain._log import LazyLogger
from contain.probe.case import AttackRun, CaseResult, ProbeContext, Target, Verdict
from contain.probe.targets import RELAXED_CONTROL_BOUNDARY, ContainTarget, HostControlTarget

__all__ = [
    "ATTACK_PRELUDE",
    "REPORT_MARK",
    "RunContext",
    "Workspace",
    "as_run_context",
    "attack",
    "attack_report",
    "canary_sinks",
    "run_attack",
    "run_evidence",
    "sandbox_host_uid",
    "succeeded",
    "verdict",
]

log = LazyLogger(__name__)

REPORT_MARK = "@@PROBE@@"
_TRIM = 2000

ATTACK_PRELUDE = r"""
import ctypes, errno, json, os, sys
_R = {}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def _short(v):
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [_short(x) for x in v][:200]
    if isinstance(v, str):
        return v[:4000]
    if isinstance(v, dict):
        return {str(k): _short(x) for k, x in list(v.items())[:200]}
    if v is None or isinstance(v, (int, float, bool)):
        return v
    return repr(v)[:400]

def rec(name, fn, *a, **kw):
    try:
        r = {"ok": True, "value": _short(fn(*a, **kw))}
    except OSError as e:
        r = {"ok": False, "errno": errno.errorcode.get(e.errno or 0, str(e.errno)), "msg": str(e)[:300]}
    except Exception as e:
        r = {"ok": False, "error": (type(e).__name__ + ": " + str(e))[:300]}
    _R[name] = r
    return r

def sysc(nr, *args):
    cargs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    r = libc.syscall(ctypes.c_long(nr), *cargs)
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r

def readf(path, n=65536):
    with open(path, "rb") as f:
        return f.read(n)

def canaries(text):
    # only this run's canary values found in text (P["pattern"]); nothing else gets printed
    import re
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return sorted(set(re.findall(P["pattern"], text)))

def note(name, value):
    _R[name] = {"ok": True, "value": _short(value)}

def proxy_endpoint():
    # Where this sandbox was told its egress proxy is: contain sets http_proxy for every run with
    # an allow list (127.0.0.1:3128 in a process or container sandbox, the guest's forwarded
    # address in a microVM). P["proxy"] wins (a control aims at its own address); without either,
    # the loopback default, which nothing should answer.
    if P.get("proxy"):
        return (P["proxy"][0], int(P["proxy"][1]))
    url = os.environ.get("http_proxy") or os.environ.get("HTTP_PROXY") or ""
    host, _, port = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1].rpartition(":")
    if host and port.isdigit():
        return (host.strip("[]"), int(port))
    return ("127.0.0.1", 3128)

def done():
    sys.stdout.write("\n@@" + "PROBE@@" + json.dumps(_R) + "\n")  # split: never in our own cmdline
    sys.stdout.flush()
"""


def attack(body: str, **params: Any) -> str:
    """Attack source: the prelude, ``P`` (the JSON-decoded ``params``), then ``body``."""
    header = f"P = json.loads({json.dumps(json.dumps(params))})\n"
    return ATTACK_PRELUDE + header + body


def attack_report(run: AttackRun) -> dict[str, Any] | None:
    """The operations record the attack printed last, or None when it never reported."""
    text = run.stdout.decode("utf-8", "replace")
    index = text.rfind(REPORT_MARK)
    if index < 0:
        return None
    line = text[index + len(REPORT_MARK) :].splitlines()[0] if text[index + len(REPORT_MARK) :] else ""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def canary_sinks(run: AttackRun, canary: str) -> list[str]:
    """Where a canary value reached a sink of this run: its output streams or the proxy log."""
    found = []
    needle = canary.encode()
    if needle in run.stdout:
        found.append("stdout")
    if needle in run.stderr:
        found.append("stderr")
    if any(canary in json.dumps(dict(event), default=str) for event in run.egress_events):
        found.append("egress log")
    return found


def run_evidence(run: AttackRun) -> dict[str, Any]:
    """A trimmed, JSON-safe account of one run."""
    evidence: dict[str, Any] = {
        "exit_code": run.exit_code,
        "signal": run.signal,
        "timed_out": run.timed_out,
        "duration_s": round(run.duration_s, 3),
        "stdout": run.stdout[-_TRIM:].decode("utf-8", "replace"),
        "stderr": run.stderr[-_TRIM:].decode("utf-8", "replace"),
    }
    result = run.run_result
    violations = getattr(result, "violations", None)
    if violations:
        evidence["violations"] = [v.to_dict() for v in violations]
    if getattr(result, "oom_killed", False):
        evidence["oom_killed"] = True
    if run.egress_events:
        evidence["egress_events"] = [dict(e) for e in run.egress_events][:20]
    return evidence


def verdict(
    case_id: str,
    *,
    breaches: list[str],
    control_shows_breach: bool | None,
    contained: str,
    control: str | None,
    evidence: dict[str, Any],
    missing: str | None = None,
) -> CaseResult:
    """Turn judge readings into a verdict.

    Args:
        breaches: what the outside judges saw escape (empty when nothing did).
        control_shows_breach: whether the positive control showed the breach (None: the case
            has no separate control run, e.g. the control is an in-sandbox allowed action that
            ``missing`` reports on).
        contained: the summary when nothing escaped.
        control: what the control showed, in words.
        missing: why the case cannot decide (the attack did not report, a prerequisite is absent).
    """
    if breaches:
        return CaseResult(case_id, Verdict.ESCAPED, "; ".join(breaches), evidence, control)
    if control_shows_breach is False:
        return CaseResult(
            case_id,
            Verdict.INCONCLUSIVE,
            "the positive control did not show the breach, so this judge cannot see one",
            evidence,
            control,
        )
    if missing:
        return CaseResult(case_id, Verdict.INCONCLUSIVE, missing, evidence, control)
    return CaseResult(case_id, Verdict.CONTAINED, contained, evidence, control)


def sandbox_host_uid() -> int:
    """The owner given to planted trees the attack may write (workspaces are write binds): nobody
    when contain is root, which a leased sandbox uid acts as through its idmapped binds, and which
    is the sandbox's own uid where idmapping is unavailable."""
    from contain.host.facts import detect_host
    from contain.runtime.plan import sandbox_host_ids

    return sandbox_host_ids(detect_host())[0]


@dataclass(frozen=True)
class Workspace:
    """A host directory bound writable into contain targets (at ``sandbox_path``); targets
    without contain hooks get the host path itself, which their sandbox may or may not show."""

    host: Path
    sandbox_path: str

    def path_for(self, target: Target) -> str:
        return self.sandbox_path if target.has_contain_hooks else str(self.host)

    def boundary(self, *, access: str = "write") -> dict[str, Any]:
        return {"files": [{"host": str(self.host), "path": self.sandbox_path, "access": access}]}


class RunContext:
    """One probe run's context (implements ``ProbeContext``).

    Args:
        target: the target under test.
        control: the positive-control target (default: the bare, bounded host runner).
        sandboxed_control: a relaxed contain target for controls unsafe on the bare host.
        run_id: defaults to 12 random hex digits.
    """

    def __init__(
        self,
        target: Target,
        *,
        control: Target | None = None,
        sandboxed_control: Target | None = None,
        run_id: str | None = None,
    ) -> None:
        self.target = target
        self.control: Target = control if control is not None else HostControlTarget()
        self.sandboxed_control: Target = (
            sandboxed_control
            if sandboxed_control is not None
            else ContainTarget("process", base_boundary=_relaxed(), label="relaxed control")
        )
        self.run_id = run_id or secrets.token_hex(6)
        self._root: Path | None = None
        self._closed = False
        self._deferred: list[Callable[[], None]] = []

    def canary(self, prefix: str = "canary") -> str:
        return f"{prefix}-{self.run_id}-{secrets.token_hex(8)}"

    @property
    def canary_pattern(self) -> str:
        """A regex matching this run's canaries (``canary()`` values) and nothing else: attacks
        that read text which may hold real secrets report only these matches."""
        return rf"[a-z]+-{self.run_id}-[0-9a-f]{{16}}"

    @property
    def root(self) -> Path:
        """A private host directory for this run's judge files (0755, removed by ``close``).

        Raises:
            RuntimeError: the context was closed (a late caller would leave a directory behind).
        """
        if self._closed:
            raise RuntimeError(f"probe run {self.run_id} is closed; its directory was removed")
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix=f"contain-probe-{self.run_id}-"))
            self._root.chmod(0o755)
        return self._root

    def defer(self, action: Callable[[], None]) -> None:
        """Run ``action`` after the current case (cleanup of planted things)."""
        self._deferred.append(action)

    def run_deferred(self) -> list[str]:
        """Run and forget the deferred actions; returns the errors they raised, as text."""
        errors = []
        while self._deferred:
            action = self._deferred.pop()
            try:
                action()
            except Exception as exc:  # cleanup must go on; the error is reported, not hidden
                errors.append(f"{type(exc).__name__}: {exc}")
        return errors

    def close(self) -> list[str]:
        """Run what is deferred and remove the run's directory; returns what could not be
        removed (also logged), so a caller can report it instead of leaving it silently."""
        errors = self.run_deferred()
        self._closed = True
        if self._root is not None:
            failures: list[str] = []
            shutil.rmtree(self._root, onerror=lambda _f, path, info: failures.append(f"{path}: {info[1]}"))
            if failures:
                log.warning("probe run %s left %d paths: %s", self.run_id, len(failures), failures[:5])
            errors += failures
            self._root = None
        return errors

    def plant_dir(self, label: str, *, writable_by_sandbox: bool = False) -> Path:
        """A fresh host directory under the run root; chowned to the sandbox uid if asked."""
        path = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.root))
        path.chmod(0o755)
        if writable_by_sandbox and os.geteuid() == 0:
            os.chown(path, sandbox_host_uid(), sandbox_host_uid())
        return path

    def workspace(self, label: str) -> Workspace:
        """A host directory the attack may write (bound at /probe/<label> in contain targets)."""
        return Workspace(self.plant_dir(label, writable_by_sandbox=True), f"/probe/{label}")

    def plant_file(self, path: Path, content: str, *, mode: int = 0o600) -> Path:
        """Create ``path`` with ``content`` (refusing to overwrite) and remove it after the case."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
        self.defer(lambda: _unlink(path))
        return path

    def plant_home_file(self, content: str) -> Path:
        """A canary file in the real ``$HOME`` of the user running the probe (removed after)."""
        home = Path(os.environ.get("HOME") or os.path.expanduser("~"))
        return self.plant_file(home / f".contain-probe-{self.canary('home')}", content)

    def give_to_sandbox(self, path: Path) -> None:
        """Chown a planted tree to the sandbox's host uid, so only the layer under test (not file
        permissions) can stop a write."""
        if os.geteuid() != 0:
            return
        uid = sandbox_host_uid()
        for current, dirs, files in os.walk(path):
            for name in (current, *(os.path.join(current, n) for n in dirs + files)):
                os.chown(name, uid, uid, follow_symlinks=False)

    def spawn_marker_process(self, marker: str, *, lifetime_s: float = 60.0) -> int:
        """A host process carrying ``marker`` in its command line and environment (killed after
        the case; it exits by itself after ``lifetime_s`` in any case). Returns its pid."""
        import subprocess

        proc = subprocess.Popen(
            ["python3", "-c", f"import time; time.sleep({lifetime_s})", marker],
            env={"PATH": "/usr/bin:/bin", "CONTAIN_PROBE_MARKER": marker},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

        def stop() -> None:
            proc.kill()
            proc.wait()

        self.defer(stop)
        return proc.pid

    @property
    def userns_control(self) -> Target:
        """A control target that is root in a fresh user and mount namespace (``unshare -rm``):
        mounts and other namespaced privileges work there without touching the host."""
        from contain.probe.targets import WrapTarget

        return WrapTarget(["unshare", "-r", "-m"])

    def remove_later(self, path: str | Path) -> None:
        """Remove ``path`` (file or tree) after the case, if an attack managed to create it."""
        self.defer(lambda: _remove_any(Path(path)))


def as_run_context(ctx: ProbeContext) -> RunContext:
    """The concrete context; host-side cases need its planting helpers."""
    if not isinstance(ctx, RunContext):
        raise TypeError(f"this case needs contain.probe.context.RunContext, got {type(ctx).__name__}")
    return ctx


def _relaxed() -> dict[str, Any]:
    from contain.probe.targets import DEFAULT_PROBE_BOUNDARY, deep_merge

    return deep_merge(DEFAULT_PROBE_BOUNDARY, RELAXED_CONTROL_BOUNDARY)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _remove_any(path: Path) -> None:
    if path.is_symlink() or path.is_file() or (path.exists() and not path.is_dir()):
        _unlink(path)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def run_attack(
    target: Target,
    body: str,
    *,
    boundary: Mapping[str, Any] | None = None,
    timeout_s: float = 20.0,
    env: Mapping[str, str] | None = None,
    **params: Any,
) -> tuple[AttackRun, dict[str, Any]]:
    """Run ``attack(body, **params)`` on ``target``; returns the run and its operations record
    (empty when the attack never reported)."""
    run = target.run_python(attack(body, **params), timeout_s=timeout_s, boundary=boundary, env=env)
    return run, attack_report(run) or {}


def succeeded(report: Mapping[str, Any], *names: str) -> list[str]:
    """The operations in ``report`` (all when no names given) that the kernel let through."""
    keys = names or tuple(report)
    return [n for n in keys if isinstance(report.get(n), Mapping) and report[n].get("ok")]
