"""What one sandboxed run produced: the RunResult and its parts.

Plain frozen values, so the same object feeds the CLI's table, ``--json``, the MCP server and the
probe's evidence. Nothing here talks to the kernel.

Everything a workload can make large is bounded before it lands here, by bytes: stdout and
stderr by ``resources.output_bytes`` each (``streams.py``), egress events by the event log's
bounds (``contain.egress.log``: clipped fields, ``MAX_LOG_BYTES``), and so the violations derived
from them. What was cut is never silent: ``Captured.truncated``/``total_bytes`` and
``RunResult.egress_dropped`` say how much, and dropped refusals still yield a violation.
"""

from __future__ import annotations

import signal as signal_module
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Captured", "RunResult", "Timings", "Usage", "Violation"]


@dataclass(frozen=True)
class Violation:
    """One thing the boundary stopped, in words an agent can act on."""

    kind: str  # e.g. "timeout", "cpu", "memory", "pids", "output", "egress", "filesystem"
    message: str  # e.g. "api.example.com:443 is not in network.allow"
    rule_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "rule_id": self.rule_id, "detail": self.detail}


@dataclass(frozen=True)
class Captured:
    """One output stream, capped while streaming."""

    data: bytes
    truncated: bool
    total_bytes: int  # bytes seen before the cap closed the stream

    def to_dict(self, name: str) -> dict[str, Any]:
        try:
            text, encoding = self.data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            import base64  # only for output that is not UTF-8

            text, encoding = base64.b64encode(self.data).decode("ascii"), "base64"
        return {
            name: text,
            f"{name}_encoding": encoding,
            f"{name}_truncated": self.truncated,
            f"{name}_total_bytes": self.total_bytes,  # seen before the cap closed the pipe
        }


@dataclass(frozen=True)
class Timings:
    """Seconds spent per phase. ``setup_s`` is shared by the runs of a session; it is the
    sandbox's start-up for the first run and 0 for later ones."""

    setup_s: float
    run_s: float
    teardown_s: float

    def to_dict(self) -> dict[str, float]:
        return {"setup_s": self.setup_s, "run_s": self.run_s, "teardown_s": self.teardown_s}


@dataclass(frozen=True)
class Usage:
    """Resources the run consumed; ``source`` says who measured (cgroup or supervisor rusage)."""

    cpu_s: float
    memory_peak_bytes: int | None
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"cpu_s": round(self.cpu_s, 6), "memory_peak_bytes": self.memory_peak_bytes, "source": self.source}


@dataclass(frozen=True)
class RunResult:
    """The outcome of ``Sandbox.run``."""

    exit_code: int | None  # None when a signal ended the command
    signal: int | None
    timed_out: bool
    oom_killed: bool
    stdout: Captured
    stderr: Captured
    timings: Timings
    usage: Usage
    violations: tuple[Violation, ...]
    backend: str
    egress: tuple[dict[str, Any], ...] = ()
    layers: dict[str, str] = field(default_factory=dict)
    # Egress attempts that happened but were not kept (the host-side log is bounded by bytes):
    # {"events", "bytes", "denied", "denied_by_rule"}; empty when nothing was dropped.
    egress_dropped: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> int:
        """The shell-style status: the exit code, 124 on timeout, 128+N for signal N."""
        if self.timed_out:
            return 124
        if self.signal is not None:
            return 128 + self.signal
        return self.exit_code if self.exit_code is not None else 125

    @property
    def ok(self) -> bool:
        """True when the command exited 0 and nothing was stopped."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": self.backend,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "signal_name": _signal_name(self.signal),
            "status": self.status,
            "timed_out": self.timed_out,
            "oom_killed": self.oom_killed,
        }
        out.update(self.stdout.to_dict("stdout"))
        out.update(self.stderr.to_dict("stderr"))
        out["timings"] = self.timings.to_dict()
        out["usage"] = self.usage.to_dict()
        out["violations"] = [v.to_dict() for v in self.violations]
        out["egress"] = list(self.egress)
        out["egress_truncated"] = bool(self.egress_dropped)
        out["egress_dropped"] = dict(self.egress_dropped)
        out["layers"] = dict(self.layers)
        return out


def _signal_name(number: int | None) -> str | None:
    if number is None:
        return None
    try:
        return signal_module.Signals(number).name
    except ValueError:
        return f"SIG{number}"
