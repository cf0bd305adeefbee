"""``MicroVMHandle``: the running microVM as ``Sandbox`` sees it, around the agent's handle.

``GuestSandbox`` (guest_handle.py) speaks the agent's protocol; this thin wrapper adds the two
things only the VMM side knows:

- **where egress is, seen from the guest.** ``Sandbox`` hands every command the proxy variables
  of the process backend (``http://127.0.0.1:3128``). In the guest, 127.0.0.1 is the guest's own
  loopback; contain's proxy is reached at ``GUEST_PROXY`` (10.0.2.100:3128), the one address QEMU's
  restricted user network forwards (vmm_plan.py). ``plan_guest_env`` rewrites exactly the values
  of ``PROXY_VARIABLES`` that name the host-side proxy address, nothing else;
- **why the VM is gone.** A ``SandboxLost`` from the channel gets the last lines of the guest's
  serial console appended (rendered with ``for_terminal``: it is guest-controlled text), so
  "the agent stopped answering" comes with the kernel's own last words (a panic, an OOM).

Every other call is passed through unchanged. What it does not do: decide anything about the
network (egress does) or the guest (the agent does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from contain.egress.session import PROXY_ADDRESS, plan_sandbox_env
from contain.errors import SandboxLost
from contain.runtime.backend import CommandRequest, RunningSandbox
from contain.runtime.cgroups import SandboxCgroup
from contain.runtime.files import ExportDestination, ExportReport
from contain.runtime.supervisor_channel import Exited, SpawnFailed, Started
from contain.visible_text import for_terminal

__all__ = ["GUEST_PROXY", "HOST_PROXY", "PROXY_VARIABLES", "MicroVMHandle", "plan_guest_env"]

HOST_PROXY = f"{PROXY_ADDRESS[0]}:{PROXY_ADDRESS[1]}"  # as the process backend's workloads see it
GUEST_PROXY = "10.0.2.100:3128"  # the guestfwd address (backend.GUEST_FORWARDS)
# The variables egress.session.plan_sandbox_env sets to the proxy URL (derived from it, not copied).
PROXY_VARIABLES = frozenset(k for k, v in plan_sandbox_env(f"http://{HOST_PROXY}").items() if HOST_PROXY in v)
SERIAL_TAIL_LINES = 12
T = TypeVar("T")


def plan_guest_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the host-side proxy address replaced by the guest's, in proxy variables only."""
    return {
        key: value.replace(HOST_PROXY, GUEST_PROXY) if key in PROXY_VARIABLES else value for key, value in env.items()
    }


class MicroVMHandle:
    """A ``RunningSandbox`` over ``inner`` (the agent's handle); see the module docstring."""

    def __init__(self, inner: RunningSandbox, *, serial_tail: Callable[[int], str], network: bool) -> None:
        self._inner = inner
        self._serial_tail = serial_tail
        self._network = network

    def _lost(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except SandboxLost as exc:
            tail = self._serial_tail(SERIAL_TAIL_LINES).strip()
            if not tail:
                raise
            # the same class (DeadlinePassed stays a timeout for Sandbox.run)
            raise type(exc)(f"{exc.cause}; the guest console ended with:\n{for_terminal(tail)}", exc.fix) from exc

    @property
    def host_pid(self) -> int:
        return self._inner.host_pid

    @property
    def netns_path(self) -> str:
        return self._inner.netns_path

    @property
    def cgroup(self) -> SandboxCgroup | None:
        return self._inner.cgroup

    def spawn(self, request: CommandRequest, fds: tuple[int, int, int]) -> Started | SpawnFailed:
        if self._network:
            request = request._replace(env=plan_guest_env(request.env))
        return self._lost(lambda: self._inner.spawn(request, fds))

    def wait_exited(self, timeout_s: float | None) -> Exited | None:
        return self._lost(lambda: self._inner.wait_exited(timeout_s))

    def fileno(self) -> int:
        return self._inner.fileno()

    def kill(self) -> None:
        self._lost(self._inner.kill)

    def put_file(self, scratch_root: str, relative: str, data: bytes, *, mode: int, label: str) -> None:
        self._lost(lambda: self._inner.put_file(scratch_root, relative, data, mode=mode, label=label))

    def get_file(self, scratch_root: str, relative: str, *, max_bytes: int, label: str) -> bytes:
        return self._lost(lambda: self._inner.get_file(scratch_root, relative, max_bytes=max_bytes, label=label))

    def export(self, sandbox_path: str, destination: ExportDestination, *, max_bytes: int) -> ExportReport:
        return self._lost(lambda: self._inner.export(sandbox_path, destination, max_bytes=max_bytes))

    def destroy(self) -> None:
        self._inner.destroy()

    def close(self) -> None:
        self._inner.close()
