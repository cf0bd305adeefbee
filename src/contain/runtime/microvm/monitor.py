"""A bounded QMP client over a socket the host holds: how the template VM is stopped and saved.

Only the template VM (snapshot.py) has a monitor. Its QMP chardev is one end of a socket pair
that QEMU inherits (``-chardev socket,fd=N``): there is no path on any file system and no
network address, so no other process, and nothing in the guest (which has no device leading to
QEMU's monitor), can reach it. Restored VMs have no monitor at all.

What this client enforces: every line QEMU sends is at most ``MAX_LINE_BYTES`` (a longer one
raises), every reply arrives within its deadline, at most ``MAX_EVENTS`` asynchronous events are
skipped while waiting for one reply, and an ``error`` reply raises. Anything else QEMU says is
an error too (``SandboxStartError``): the template build is abandoned and its VM killed by the
caller. It passes descriptors only with ``getfd`` (SCM_RIGHTS), the one command that needs them.

What it does not do: retry, or understand more of QMP than the template build needs.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from contain.errors import SandboxStartError

__all__ = ["MAX_EVENTS", "MAX_LINE_BYTES", "Monitor"]

MAX_LINE_BYTES = 64 * 1024  # QMP replies the template build asks for are well under 2 KiB
MAX_EVENTS = 64  # events skipped while waiting for one reply (STOP, RESUME, MIGRATION ...)
_FIX = "rerun with CONTAIN_DEBUG=1; `contain microvm snapshot clear` and retry"


class Monitor:
    """QMP over a connected stream socket; see the module docstring."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def greet(self, *, timeout_s: float) -> Mapping[str, Any]:
        """Read QEMU's greeting and leave capabilities negotiation (``qmp_capabilities``)."""
        greeting = self._read_message(deadline=time.monotonic() + timeout_s)
        if "QMP" not in greeting:
            raise SandboxStartError(f"QEMU's monitor did not greet with QMP: {_short(greeting)}", _FIX)
        self.execute("qmp_capabilities", timeout_s=timeout_s)
        return greeting

    def execute(
        self,
        command: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout_s: float,
        fds: Sequence[int] = (),
    ) -> Any:
        """Run one command and return its ``return`` value.

        Raises:
            SandboxStartError: an error reply, no reply within ``timeout_s``, or a broken stream.
        """
        message: dict[str, Any] = {"execute": command}
        if arguments:
            message["arguments"] = dict(arguments)
        data = json.dumps(message).encode() + b"\n"
        try:
            if fds:
                socket.send_fds(self._sock, [data], list(fds))
            else:
                self._sock.sendall(data)
        except OSError as exc:
            raise SandboxStartError(f"cannot send {command} to QEMU's monitor: {exc.strerror}", _FIX) from exc
        deadline = time.monotonic() + timeout_s
        for _ in range(MAX_EVENTS + 1):
            reply = self._read_message(deadline=deadline)
            if "event" in reply:
                continue
            if "error" in reply:
                raise SandboxStartError(f"QEMU refused {command}: {_short(reply['error'])}", _FIX)
            if "return" not in reply:
                raise SandboxStartError(f"QEMU answered {command} with {_short(reply)}", _FIX)
            return reply["return"]
        raise SandboxStartError(f"QEMU sent more than {MAX_EVENTS} events while {command} waited", _FIX)

    def wait_event(self, name: str, *, timeout_s: float, accept: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
        """The first event ``name`` (whose data contains ``accept``, when given) within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        for _ in range(MAX_EVENTS + 1):
            message = self._read_message(deadline=deadline)
            if message.get("event") != name:
                continue
            data = message.get("data") or {}
            if accept is None or all(data.get(k) == v for k, v in accept.items()):
                return dict(data)
        raise SandboxStartError(f"QEMU sent more than {MAX_EVENTS} events before {name}", _FIX)

    def _read_message(self, *, deadline: float) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise SandboxStartError(f"QEMU's monitor sent a line longer than {MAX_LINE_BYTES} bytes", _FIX)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._sock], [], [], remaining)[0]:
                raise SandboxStartError("QEMU's monitor did not answer in time", _FIX)
            chunk = self._sock.recv(MAX_LINE_BYTES)
            if not chunk:
                raise SandboxStartError("QEMU's monitor closed (QEMU ended)", _FIX)
            self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        if len(line) > MAX_LINE_BYTES:
            raise SandboxStartError(f"QEMU's monitor sent a line longer than {MAX_LINE_BYTES} bytes", _FIX)
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise SandboxStartError(f"QEMU's monitor sent something that is not JSON: {line[:80]!r}", _FIX) from exc
        if not isinstance(message, dict):
            raise SandboxStartError(f"QEMU's monitor sent {_short(message)}", _FIX)
        return message


def _short(value: object) -> str:
    return json.dumps(value)[:200]
