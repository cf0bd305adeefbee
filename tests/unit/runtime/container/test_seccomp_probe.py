"""The seccomp self-check program: a valid static ELF whose exit status is ptrace's errno."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import pytest

from contain.errors import UnsupportedHost
from contain.runtime.container.seccomp_probe import CLONE3_NOT_ENOSYS, probe_program


def test_the_program_is_one_loadable_segment_entering_right_after_the_headers():
    program = probe_program("x86_64")
    assert program[:4] == b"\x7fELF" and program[4] == 2 and program[18] == 0x3E
    assert int.from_bytes(program[24:32], "little") == 0x400000 + 64 + 56
    assert program.endswith(bytes.fromhex("b83c0000000f05"))  # exit(errno)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the probe is built for x86_64 only")
def test_on_the_bare_host_it_reports_that_clone3_is_open(tmp_path: Path):
    """Positive control for the clone3 check: the host kernel has clone3 (EINVAL for a NULL struct)."""
    path = tmp_path / "probe"
    path.write_bytes(probe_program("x86_64"))
    path.chmod(0o555)
    assert subprocess.run([str(path)], check=False, timeout=10).returncode == CLONE3_NOT_ENOSYS


def test_other_architectures_are_refused_not_run_unchecked():
    with pytest.raises(UnsupportedHost, match="x86_64 only, not aarch64"):
        probe_program("aarch64")
