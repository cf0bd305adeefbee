"""What trusted code hands into one sandbox that the boundary itself cannot name.

A capability token for the broker, the broker's Unix socket, a client script: these appear under
/.contain (read-only files, or a bound socket) only because the code starting the sandbox put them
there. The manifest cannot ask for them, so a task cannot widen its own reach this way.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from contain.errors import SandboxStartError
from contain.runtime.bwrap import SUPERVISOR_SANDBOX_PATH

__all__ = ["MAX_ATTACHMENT_BYTES", "Attachment"]

# Data travels to bwrap through a pipe written before the spawn, so it must fit the pipe buffer.
MAX_ATTACHMENT_BYTES = 60_000
BUG = "this is a bug in the code that starts the sandbox"


@dataclass(frozen=True)
class Attachment:
    """Something a trusted service hands into one sandbox under /.contain: a read-only file
    (``data``) such as a capability token, or a host Unix socket (``host_path``) such as the
    broker's. The boundary cannot name these; only the code that starts the sandbox can."""

    sandbox_path: str
    data: bytes | None = None
    host_path: str | None = None

    def validate(self) -> None:
        """Raises SandboxStartError for a path outside /.contain, both or neither source, or oversize data."""
        path = self.sandbox_path
        if not path.startswith("/.contain/") or posixpath.normpath(path) != path or "\x00" in path:
            raise SandboxStartError(f"attachment path {path!r} must be a normalised path under /.contain/", BUG)
        if path == SUPERVISOR_SANDBOX_PATH:
            raise SandboxStartError("an attachment cannot replace the supervisor", BUG)
        if (self.data is None) == (self.host_path is None):
            raise SandboxStartError(f"attachment {path} needs exactly one of data or host_path", BUG)
        if self.data is not None and len(self.data) > MAX_ATTACHMENT_BYTES:
            raise SandboxStartError(f"attachment {path} is larger than {MAX_ATTACHMENT_BYTES} bytes", "keep it small")
