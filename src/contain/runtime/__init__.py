"""Sandbox runtime: one interface (``Sandbox``), the backend seam and its recording fake, and the run result."""

from contain.runtime.backend import BackendPlan, RecordingBackend, RunningSandbox, SandboxBackend
from contain.runtime.result import Captured, RunResult, Timings, Usage, Violation
from contain.runtime.sandbox import BACKENDS, Attachment, Sandbox

__all__ = [
    "BACKENDS",
    "Attachment",
    "BackendPlan",
    "Captured",
    "RecordingBackend",
    "RunResult",
    "RunningSandbox",
    "Sandbox",
    "SandboxBackend",
    "Timings",
    "Usage",
    "Violation",
]
