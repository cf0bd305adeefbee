"""Which differences from Linux the in-sandbox supervisor may accept, per kernel that runs the workload.

The supervisor (``runtime/supervisor/contain-supervisor.c``) treats a call its kernel does not
implement as fatal, unless the host names that difference with ``--accept-difference NAME``.
This module is the host's half: one row per difference, with the kernels where contain accepts
it and why the guarantee still holds there. ``supervisor_difference_args(kernel=...)`` turns the
rows into the supervisor's arguments; ``reported_differences(ready)`` reads back from ``READY``
which of them the kernel actually showed, so a backend can put the difference in its layers.

What it enforces: a difference is accepted only on the kernels its row names (gVisor's sentry
for the one row today); on Linux the supervisor gets no ``--accept-difference`` and a missing
call stays fatal there. The supervisor still checks at start-up whether the call is missing and
reports it in ``READY`` (``securebits=unsupported``); accepting a difference never makes the
supervisor skip a call the kernel has.

What it does not do: decide which kernel a backend runs (the backend passes ``kernel=``), or
cover gaps the supervisor does not probe. ``close_range`` past ``INT_MAX`` (EINVAL in gVisor) and
its absence (ENOSYS before Linux 5.9) are not rows: the supervisor falls back to closing what
``/proc/self/fd`` lists and gives up nothing. Landlock missing in gVisor is the Landlock plan's
business (``hardening.landlock``), reported as ``landlock=unavailable``.
"""

from __future__ import annotations

from dataclasses import dataclass

from contain.runtime.supervisor_channel import Ready

__all__ = [
    "KERNEL_DIFFERENCES",
    "WORKLOAD_KERNELS",
    "KernelDifference",
    "reported_differences",
    "supervisor_difference_args",
]

# Kernels a workload can run on: Linux itself (process, container:runc, the microVM's guest) or
# gVisor's user-space kernel (container:runsc).
WORKLOAD_KERNELS: tuple[str, ...] = ("linux", "gvisor")


@dataclass(frozen=True)
class KernelDifference:
    """One call a kernel lacks, accepted on ``kernels`` because ``why`` still holds there."""

    name: str  # the supervisor's --accept-difference NAME (its KERNEL_DIFFERENCES row)
    kernels: frozenset[str]  # where contain accepts it; a subset of WORKLOAD_KERNELS
    layer: str  # the layer that is weaker, as a backend reports it ("securebits")
    missing: str  # what the kernel lacks, and how it answers
    why: str  # why the workload is still left with no capability (or whatever the layer protected)
    measured: str  # where the difference was seen


KERNEL_DIFFERENCES: tuple[KernelDifference, ...] = (
    KernelDifference(
        name="no-securebits",
        kernels=frozenset({"gvisor"}),
        layer="securebits",
        missing="prctl(PR_GET_SECUREBITS) and prctl(PR_SET_SECUREBITS) return EINVAL",
        why=(
            "securebits (NOROOT, NO_SETUID_FIXUP, locked) only keep uid 0 from regaining capabilities "
            "at exec; the workload still ends with capset(0) verified by capget, a bounding set the "
            "supervisor verifies empty (a failure there is fatal when this row is taken) and "
            "no_new_privs, under which exec adds no capability; inside gVisor the capabilities are "
            "the sentry's, never the host kernel's"
        ),
        measured="runsc 0.0~20221219.0 (Debian 12), docs/gvisor-notes.md; tests/integration/test_supervisor_runsc.py",
    ),
)


def supervisor_difference_args(*, kernel: str) -> tuple[str, ...]:
    """The supervisor's ``--accept-difference`` arguments for a workload running on ``kernel``.

    Args:
        kernel: one of ``WORKLOAD_KERNELS``: "linux" or "gvisor" (container:runsc).

    Returns:
        ``("--accept-difference", NAME, ...)`` for each row that names ``kernel``; empty on Linux.

    Raises:
        ValueError: ``kernel`` is not a known workload kernel (a typo must not mean "Linux").
    """
    if kernel not in WORKLOAD_KERNELS:
        raise ValueError(f"unknown workload kernel {kernel!r}; known: {', '.join(WORKLOAD_KERNELS)}")
    args: list[str] = []
    for row in KERNEL_DIFFERENCES:
        if kernel in row.kernels:
            args += ["--accept-difference", row.name]
    return tuple(args)


def reported_differences(ready: Ready) -> tuple[KernelDifference, ...]:
    """The rows whose difference the supervisor's ``READY`` reports as present on its kernel.

    A backend puts these in its layers (for example "securebits: unsupported by the kernel,
    no_new_privs and an empty bounding set hold instead").
    """
    present = {"securebits"} if ready.securebits == "unsupported" else set()
    return tuple(row for row in KERNEL_DIFFERENCES if row.layer in present)
