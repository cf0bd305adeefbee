"""Every command stops quietly when the reader of its output goes away, as Unix tools do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

MANIFEST = 'version: 1\ntask: t\nthreats: [generated_code]\nnetwork:\n  allow:\n    - {host: "*.github.io"}\n'


@pytest.mark.parametrize(
    "args",
    [
        ["check", "{manifest}", "--format", "sarif"],
        ["check", "{manifest}", "--format", "json"],
        ["schema"],
    ],
)
def test_a_closed_stdout_ends_the_command_without_a_traceback(tmp_path: Path, args: list[str]) -> None:
    manifest = tmp_path / "contain.yaml"
    manifest.write_text(MANIFEST)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from contain.cli import main; sys.exit(main())"]
            + [a.format(manifest=manifest) for a in args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.stderr == b""
    assert done.returncode == 128 + signal.SIGPIPE
