"""Does runsc apply the OCI linux.seccomp section rendered from contain's SECCOMP_RULES?

Renders contain.runtime.container.oci_seccomp.render_oci_seccomp(arch="x86_64"), puts it in
the spec, and inside calls ptrace(PTRACE_TRACEME) and process_vm_readv on itself (both succeed
with no filter; the table denies both with EPERM). Three runs: no seccomp section (control),
the section without --oci-seccomp, the section with --oci-seccomp.
Run as root: python3 seccomp_oci.py
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))
import _bundle as b

from contain.runtime.container.oci_seccomp import render_oci_seccomp

INSIDE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    r = getattr(libc, name)(*args)
    return "ok" if r >= 0 else "errno=%d" % ctypes.get_errno()
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
src = ctypes.create_string_buffer(b"x" * 8); dst = ctypes.create_string_buffer(8)
l = iovec(ctypes.cast(dst, ctypes.c_void_p), 8); r = iovec(ctypes.cast(src, ctypes.c_void_p), 8)
vm = libc.process_vm_readv(os.getpid(), ctypes.byref(l), 1, ctypes.byref(r), 1, 0)
print("ptrace(TRACEME):", call("ptrace", 0, 0, 0, 0), "process_vm_readv(self):",
      "ok" if vm >= 0 else "errno=%d" % ctypes.get_errno())
"""


def main() -> int:
    section = render_oci_seccomp(arch="x86_64")
    print(f"rendered linux.seccomp: defaultAction={section['defaultAction']}, {len(section['syscalls'])} rows")
    for label, flags, sec in (
        ("no seccomp section (control)", ["--network=none"], None),
        ("section, runsc without --oci-seccomp", ["--network=none"], section),
        ("section, runsc --oci-seccomp", ["--network=none", "--oci-seccomp"], section),
    ):
        r = b.run_container(["/usr/bin/python3", "-c", INSIDE], global_flags=flags, seccomp=sec)
        out = r.stdout.decode().strip() or r.stderr.decode().strip()[-400:]
        b.show(f"{label}: ptrace denied with EPERM", "ptrace(TRACEME): errno=1" in out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
