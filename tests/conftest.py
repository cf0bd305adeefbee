"""Shared test helpers: skip only for a missing kernel or host feature, and say which."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def _userns_works() -> bool:
    if shutil.which("bwrap") is None:
        return False
    probe = subprocess.run(
        [
            "bwrap",
            "--unshare-user",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--symlink",
            "usr/lib",
            "/lib",
            "/usr/bin/true",
        ],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


USERNS = _userns_works()
IS_ROOT = os.geteuid() == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "needs_bwrap" in item.keywords and not USERNS:
            item.add_marker(
                pytest.mark.skip(reason="bubblewrap or unprivileged user namespaces are not available on this host")
            )
        if "needs_root" in item.keywords and not IS_ROOT:
            item.add_marker(
                pytest.mark.skip(reason="needs root: cgroup creation and running the sandbox as another uid")
            )


@pytest.fixture
def host_tmp():
    """A temporary directory the sandbox user (nobody, when tests run as root) can traverse.

    pytest's tmp_path lives under a 0700 directory, which the sandbox user cannot enter.
    """
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="contain-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
