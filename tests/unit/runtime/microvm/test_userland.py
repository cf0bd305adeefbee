"""The userland plan: ldd parsing, exclusions, the tables."""

from __future__ import annotations

from contain.runtime.microvm.userland import (
    GENERATED_ETC,
    USERLAND_EXCLUDED,
    USERLAND_PROGRAMS,
    USERLAND_TREES,
    parse_ldd,
    plan_userland,
)

LDD = """/usr/bin/python3.11:
\tlinux-vdso.so.1 (0x00007ffd5a3f2000)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f0e1c2a0000)
\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f0e1c281000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f0e1c6d1000)
/usr/bin/env:
\tnot a dynamic executable
"""


def test_ldd_output_gives_the_libraries_and_the_loader_but_not_the_vdso():
    assert parse_ldd(LDD) == (
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/lib64/ld-linux-x86-64.so.2",
    )


def test_the_plan_is_sorted_unique_and_drops_excluded_trees():
    files = plan_userland(
        ["/usr/bin/python3", "/usr/lib/python3.11/os.py", "/usr/lib/python3.11/test/test_os.py"],
        ["/lib/x86_64-linux-gnu/libz.so.1", "/usr/bin/python3"],
    )
    assert files == ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/bin/python3", "/usr/lib/python3.11/os.py")


def test_every_row_gives_a_reason_and_no_secret_reaches_the_image():
    for row in (*USERLAND_PROGRAMS, *USERLAND_TREES, *USERLAND_EXCLUDED):
        assert row.why, row.path
    copied = [row.path for row in (*USERLAND_PROGRAMS, *USERLAND_TREES)]
    for secret in ("/etc/shadow", "/etc/machine-id", "/root", "/home", "/etc/ssh"):
        assert not any(p == secret or p.startswith(secret + "/") for p in copied)
    assert "sandbox:x:1000:1000:" in GENERATED_ETC["etc/passwd"]
