"""Shared test helpers: skip only for a missing kernel or host feature, and say which."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from bwrap_args import USR_ONLY_SANDBOX


def _bwrap_missing() -> str | None:
    """Why bubblewrap cannot build a sandbox's namespaces here, or None when it can.

    The check unshares every namespace (as the sandboxes and the integration tests' own bwrap
    command lines do), so a host that allows a user namespace but refuses, say, a network
    namespace inside it is reported here instead of failing a test.
    """
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    trial = subprocess.run([bwrap, *USR_ONLY_SANDBOX, "/usr/bin/true"], capture_output=True, text=True, check=False)
    if trial.returncode != 0:
        return f"bwrap cannot create user/pid/net/ipc namespaces here (kernel.unprivileged_userns_clone, user.max_user_namespaces, AppArmor?): {trial.stderr.strip()[-200:]}"
    return None


def _netns_missing() -> str | None:
    if not os.path.exists("/proc/self/ns/net"):
        return "the kernel has no network namespaces (CONFIG_NET_NS)"
    return None


BWRAP_MISSING = _bwrap_missing()
NETNS_MISSING = _netns_missing()
IS_ROOT = os.geteuid() == 0

# marker -> why tests carrying it cannot run on this host (None: they can).
MARKER_SKIPS: dict[str, str | None] = {
    "needs_bwrap": BWRAP_MISSING,
    "needs_root": None if IS_ROOT else "needs root: cgroup creation and running the sandbox as another uid",
    "needs_netns": NETNS_MISSING,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, reason in MARKER_SKIPS.items():
            if reason is not None and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


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
