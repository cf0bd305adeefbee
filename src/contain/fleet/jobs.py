"""Jobs for ``contain fleet``: one JSON object per line, validated one line at a time.

A job names a manifest (a path, relative to the jobs file, or an inline mapping), a command (an
argv) or Python code (run as ``python3 -c CODE``), input files to put under a scratch path
before it runs, scratch paths to bring back after, and an id unique in the batch. Example::

    {"id": "t1", "manifest": "task.yaml", "command": ["sh", "-c", "wc -c < /tmp/in"],
     "inputs": [{"path": "/tmp/in", "text": "hello"}], "outputs": ["/tmp/out.txt"]}

``prepare_jobs`` turns lines into ``PreparedJob`` values (the manifest already validated on the
driver and dumped to JSON, so workers rebuild it without pydantic) or ``JobProblem`` values: a bad
line, a bad manifest or a duplicate id fails that job alone, with the line number and the cause;
the batch goes on. Nothing here runs anything.

What is enforced here: the shape of a job (unknown keys refused), ids unique in the batch, sizes
bounded (a line, an input, the number of inputs and outputs), sandbox paths absolute and
normalised. What is not: whether an input path lies under a scratch path and fits the disk
budget (``Sandbox.put_file`` refuses it on the node, and that job fails), whether the command
exists in the sandbox (its RunResult says 127).
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from contain.boundary.fleet_settings import FleetSettings
from contain.errors import BoundaryInvalid

__all__ = [
    "MAX_INPUTS",
    "MAX_JOB_LINE_BYTES",
    "MAX_OUTPUTS",
    "InputFile",
    "Job",
    "JobProblem",
    "PreparedJob",
    "backend_of",
    "prepare_jobs",
    "read_job_lines",
]

# A line holds its inputs inline, so it is bounded: 8 MiB keeps one job's inputs reasonable while
# a batch of thousands still fits in the driver's memory.
MAX_JOB_LINE_BYTES = 8 * 1024 * 1024
MAX_INPUTS = 64
MAX_OUTPUTS = 64
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_STRICT = ConfigDict(extra="forbid", frozen=True)


def _sandbox_path(value: str) -> str:
    if not value.startswith("/") or posixpath.normpath(value) != value or "\x00" in value:
        raise ValueError(f"{value!r} must be an absolute, normalised sandbox path, e.g. /tmp/out.txt")
    return value


class InputFile(BaseModel):
    """One file put into the sandbox before the job runs (exactly one of ``text`` and ``base64``)."""

    model_config = _STRICT
    path: str = Field(description="Sandbox path under a scratch path, e.g. /tmp/data.csv.")
    text: str | None = Field(default=None, description="Content as UTF-8 text, e.g. 'a,b\\n1,2\\n'.")
    base64: str | None = Field(default=None, description="Content as base64, e.g. 'aGVsbG8='.")
    mode: int = Field(default=0o644, ge=0, le=0o777, description="Permission bits, e.g. 420 (0644).")

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        return _sandbox_path(value)

    @model_validator(mode="after")
    def _one_content(self) -> InputFile:
        if (self.text is None) == (self.base64 is None):
            raise ValueError(f"input {self.path}: give exactly one of text and base64")
        if self.base64 is not None:
            try:
                base64.b64decode(self.base64, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"input {self.path}: base64 is not valid ({exc})") from exc
        return self

    def data(self) -> bytes:
        """The file's bytes."""
        if self.text is not None:
            return self.text.encode()
        assert self.base64 is not None
        return base64.b64decode(self.base64, validate=True)


class Job(BaseModel):
    """One job line, as written (see the module docstring)."""

    model_config = _STRICT
    id: str = Field(description="Unique in the batch: 1-128 of [A-Za-z0-9_.:-], e.g. rollout-0017.")
    manifest: str | dict[str, Any] = Field(description="Manifest path (relative to the jobs file) or inline mapping.")
    command: tuple[str, ...] | None = Field(default=None, description="The argv to run, e.g. [sh, -c, 'echo hi'].")
    code: str | None = Field(default=None, description="Python code run as python3 -c CODE, e.g. 'print(1)'.")
    inputs: tuple[InputFile, ...] = Field(default=(), max_length=MAX_INPUTS, description="Files put in first.")
    outputs: tuple[str, ...] = Field(default=(), max_length=MAX_OUTPUTS, description="Scratch files brought back.")
    timeout_s: float | None = Field(default=None, gt=0, description="Wall clock, at most resources.wall_s, e.g. 30.")

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not _ID.fullmatch(value):
            raise ValueError(f"id {value!r} must be 1-128 of letters, digits, _ . : - and start with a letter or digit")
        return value

    @field_validator("outputs")
    @classmethod
    def _check_outputs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            _sandbox_path(path)
        if len(set(value)) != len(value):
            raise ValueError("outputs: a path is listed twice")
        return value

    @model_validator(mode="after")
    def _one_program(self) -> Job:
        if (self.command is None) == (self.code is None):
            raise ValueError("give exactly one of command and code")
        if self.command is not None and (not self.command or any("\x00" in a for a in self.command)):
            raise ValueError("command must be a non-empty argv without NUL bytes")
        return self

    def argv(self) -> tuple[str, ...]:
        """What the sandbox runs."""
        return self.command if self.command is not None else ("python3", "-c", self.code or "")


@dataclass(frozen=True)
class PreparedJob:
    """A job ready to ship to a node: its manifest validated and dumped as JSON.

    ``boundary_dump`` is ``Boundary.model_dump(mode="json")`` (workers rebuild a ``PlainBoundary``
    from it); ``manifest_digest`` names that dump, so equal manifests share warm sandboxes.
    """

    line: int
    job: Job
    boundary_dump: dict[str, Any]
    manifest_digest: str
    backend: str
    fleet: FleetSettings

    @property
    def id(self) -> str:
        return self.job.id


@dataclass(frozen=True)
class JobProblem:
    """A line that cannot become a job; it fails alone. ``job_id`` is None when the line had none."""

    line: int
    job_id: str | None
    cause: str
    fix: str


def read_job_lines(path: str | Path) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of each non-blank line of a jobs file; text None for an oversize line.

    Raises:
        BoundaryInvalid: the file cannot be read.
    """
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with below, when the generator ends
    except OSError as exc:
        raise BoundaryInvalid(f"cannot read the jobs file {path}: {exc.strerror}", "pass a JSONL file") from exc
    with handle:
        number = 0
        while raw := handle.readline(MAX_JOB_LINE_BYTES + 1):
            number += 1
            if len(raw) > MAX_JOB_LINE_BYTES and not raw.endswith(b"\n"):
                while (rest := handle.readline(MAX_JOB_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass  # the rest of the oversize line; the line becomes a JobProblem
                yield number, None
                continue
            text = raw.decode("utf-8", errors="replace").strip()
            if text:
                yield number, text


def backend_of(boundary_dump: dict[str, Any]) -> str:
    """The backend spec a job's sandbox needs, from its validated manifest (``runtime.backend``).

    ``container`` is spelled with its OCI runtime, ``runtime.container.runtime`` (default runc), as
    ``RunResult.backend`` reports it: ``container:runc`` or ``container:runsc``.
    """
    runtime = boundary_dump.get("runtime") or {}
    backend = str(runtime.get("backend", "process"))
    if backend == "container":
        container = runtime.get("container")
        variant = container.get("runtime") if isinstance(container, dict) else None
        return f"container:{variant or 'runc'}"
    return backend


def prepare_jobs(lines: Iterable[tuple[int, str | None]], *, base_dir: Path) -> Iterator[PreparedJob | JobProblem]:
    """Validate each line into a ``PreparedJob``, or a ``JobProblem`` that fails that job alone.

    Manifest files are read once per path; a duplicate id fails the later line.
    """
    from contain.boundary.load import boundary_from_mapping, load_boundary

    seen: set[str] = set()
    manifests: dict[str, dict[str, Any] | BoundaryInvalid] = {}
    for number, text in lines:
        if text is None:
            yield JobProblem(number, None, f"line {number} is longer than {MAX_JOB_LINE_BYTES} bytes", "split it")
            continue
        job_id = _peek_id(text)
        try:
            job = Job.model_validate_json(text)
        except ValidationError as exc:
            yield JobProblem(number, job_id, f"line {number}: {_first_error(exc)}", "fix the line (see docs/fleet.md)")
            continue
        if job.id in seen:
            yield JobProblem(number, job.id, f"line {number}: job id {job.id!r} is used twice", "make ids unique")
            continue
        seen.add(job.id)
        try:
            if isinstance(job.manifest, str):
                where = str((base_dir / job.manifest).resolve())
                if where not in manifests:
                    try:
                        manifests[where] = load_boundary(where).model_dump(mode="json")
                    except BoundaryInvalid as exc:
                        manifests[where] = exc
                loaded = manifests[where]
                if isinstance(loaded, BoundaryInvalid):
                    raise loaded
                dump = loaded
            else:
                dump = boundary_from_mapping(
                    job.manifest, source=f"job {job.id} (line {number})", base_dir=base_dir
                ).model_dump(mode="json")
        except BoundaryInvalid as exc:
            problems = "; ".join(exc.problems[:3]) or exc.cause
            yield JobProblem(number, job.id, f"job {job.id}: its manifest is invalid: {problems}", exc.fix)
            continue
        backend = backend_of(dump)
        if backend == "none":
            yield JobProblem(
                number,
                job.id,
                f"job {job.id}: its manifest says runtime.backend: none, which runs nothing in a sandbox",
                "set runtime.backend: process (or container, microvm)",
            )
            continue
        yield PreparedJob(
            line=number,
            job=job,
            boundary_dump=dump,
            manifest_digest=_digest(dump),
            backend=backend,
            fleet=FleetSettings.model_validate(dump.get("fleet") or {}),
        )


def _digest(dump: dict[str, Any]) -> str:
    import hashlib

    canonical = json.dumps(dump, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _peek_id(text: str) -> str | None:
    """The line's id when it has a usable one, so even an invalid job is reported under its id."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    job_id = value.get("id") if isinstance(value, dict) else None
    return job_id if isinstance(job_id, str) and _ID.fullmatch(job_id) else None


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    shown = []
    for error in errors[:3]:
        where = ".".join(str(part) for part in error.get("loc", ())) or "(the line)"
        shown.append(f"{where}: {error.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(shown) + more
