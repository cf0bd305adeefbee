"""A 176-byte static program that checks two rows of the seccomp table from inside a sandbox: it
exits with 100 unless ``clone3`` answers ENOSYS, else with the errno ``ptrace(PTRACE_TRACEME)`` got
(0 when the call succeeded): the container backend's check that a seccomp profile really took.

Why a hand-made program: runsc ignores ``linux.seccomp`` silently without ``--oci-seccomp``
(docs/gvisor-notes.md §3), so the backend runs this inside every runsc sandbox before any workload
and refuses the sandbox unless it exits with EPERM, the action of ``SECCOMP_RULES``' ptrace row
(PR-03), and clone3 answering ENOSYS (bundle.RUNTIME_DIFFERENCES ``clone3-enosys-from-the-sentry``:
under runsc the row is left out because runsc answers it with EPERM, so a sentry that grew a
clone3 must be refused, not run with clone3 open). It cannot rely on a program of the sandbox:
an image may have no python or C library. The bytes below are the whole ELF (header, one PT_LOAD
segment, nineteen instructions), built as data so a reviewer can read every instruction.

Enforces nothing by itself; the check is ``container/backend.py``'s. Only x86_64 is built; on any
other architecture ``probe_program`` raises ``UnsupportedHost`` (runsc is then refused, not run
unchecked).
"""

from __future__ import annotations

import struct

from contain.errors import UnsupportedHost

__all__ = ["CLONE3_NOT_ENOSYS", "PROBE_SANDBOX_PATH", "probe_program"]

PROBE_SANDBOX_PATH = "/.contain/seccomp-probe"
CLONE3_NOT_ENOSYS = 100  # exit status when clone3 answered anything but ENOSYS
_BASE = 0x400000  # load address of the one segment
_EHDR_SIZE, _PHDR_SIZE = 64, 56

# x86_64 System V syscall ABI: number in eax, arguments in rdi, rsi, rdx, r10; result in rax.
_X86_64_CODE = bytes.fromhex(
    "31ff"  # xor edi, edi          clone3(NULL, 0)
    "31f6"  # xor esi, esi
    "b8b3010000"  # mov eax, 435    __NR_clone3
    "0f05"  # syscall               must be -ENOSYS (the table's row, or a kernel without clone3)
    "4883f8da"  # cmp rax, -38
    "740c"  # je +12                to the ptrace check
    "bf64000000"  # mov edi, 100    CLONE3_NOT_ENOSYS
    "b83c000000"  # mov eax, 60     __NR_exit
    "0f05"  # syscall
    "31ff"  # xor edi, edi          request = PTRACE_TRACEME (0)
    "31f6"  # xor esi, esi          pid = 0
    "31d2"  # xor edx, edx          addr = 0
    "4d31d2"  # xor r10, r10        data = 0
    "b865000000"  # mov eax, 101    __NR_ptrace
    "0f05"  # syscall               rax = 0 or -errno
    "f7d8"  # neg eax               errno (or 0)
    "89c7"  # mov edi, eax          exit status = errno & 0xff
    "b83c000000"  # mov eax, 60     __NR_exit
    "0f05"  # syscall
)


def probe_program(arch: str) -> bytes:
    """The whole ELF executable for ``arch`` (``HostFacts.arch``).

    Raises:
        UnsupportedHost: no probe is built for ``arch``.
    """
    if arch != "x86_64":
        raise UnsupportedHost(
            f"the seccomp self-check program is built for x86_64 only, not {arch}",
            "use --backend container:runc or process on this architecture",
        )
    size = _EHDR_SIZE + _PHDR_SIZE + len(_X86_64_CODE)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, version 1, System V
    ehdr = ident + struct.pack(
        "<HHIQQQIHHHHHH",
        2,  # e_type ET_EXEC
        0x3E,  # e_machine EM_X86_64
        1,  # e_version
        _BASE + _EHDR_SIZE + _PHDR_SIZE,  # e_entry: the first instruction
        _EHDR_SIZE,  # e_phoff
        0,  # e_shoff: no section headers
        0,  # e_flags
        _EHDR_SIZE,
        _PHDR_SIZE,
        1,  # e_phnum
        0,  # e_shentsize
        0,  # e_shnum
        0,  # e_shstrndx
    )
    phdr = struct.pack(
        "<IIQQQQQQ",
        1,  # PT_LOAD
        5,  # PF_R | PF_X
        0,  # p_offset: the whole file
        _BASE,
        _BASE,
        size,
        size,
        0x1000,
    )
    return ehdr + phdr + _X86_64_CODE
