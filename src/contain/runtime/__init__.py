"""Sandbox runtime: one interface (``Sandbox``), the process backend, and the run result."""

from contain.runtime.result import Captured, RunResult, Timings, Usage, Violation
from contain.runtime.sandbox import BACKENDS, Attachment, Sandbox

__all__ = ["BACKENDS", "Attachment", "Captured", "RunResult", "Sandbox", "Timings", "Usage", "Violation"]
