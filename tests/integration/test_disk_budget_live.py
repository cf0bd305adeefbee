"""One disk budget for the whole sandbox, checked by filling every writable place from inside.

Judged from outside: the host reads what each write reported and the sandbox's mountinfo. The
positive control is the same fill with a budget larger than the sum, which takes it all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contain.boundary import Boundary
from contain.runtime import Sandbox

pytestmark = [pytest.mark.needs_bwrap]

MIB = 1024**2
PY = "/usr/bin/python3"
CONTAIN = str(Path(sys.executable).with_name("contain"))

# Writes `each` bytes to every place (and /dev), reports what each took, as one JSON line.
FILL = r"""
import json, os, sys
each = int(sys.argv[1])
out = {}
for d in sys.argv[2:]:
    written = 0
    try:
        with open(f"{d}/fill", "wb") as f:
            while written < each:
                written += f.write(b"\0" * min(1 << 20, each - written))
                f.flush()
    except OSError as e:
        out[d + " error"] = e.errno
    out[d] = written
files = 0
try:
    while files < 100_000:
        os.close(os.open(f"/tmp/n{files}", os.O_CREAT | os.O_WRONLY, 0o600))
        files += 1
except OSError as e:
    out["files error"] = e.errno
out["files"] = files
print(json.dumps(out))
"""
PLACES = ["/tmp", "/dev/shm", "/work/a", "/work/b", "/dev"]


def fill(disk: str, each: int) -> dict[str, int]:
    b = Boundary.model_validate(
        {
            "resources": {"disk_bytes": disk},
            "files": [{"path": "/work/a", "access": "scratch"}, {"path": "/work/b", "access": "scratch"}],
        }
    )
    with Sandbox(b) as sb:
        result = sb.run([PY, "-c", FILL, str(each), *PLACES], timeout=60)
    assert result.exit_code == 0, result.stderr.data
    return json.loads(result.stdout.data)


@pytest.mark.needs_root
def test_tmp_shm_and_every_scratch_path_share_one_budget_and_dev_takes_nothing():
    report = fill("8MiB", 6 * MIB)
    assert sum(report[p] for p in PLACES) <= 8 * MIB
    assert report["/dev"] == 0 and report["/dev error"] == 30  # EROFS
    assert report["/tmp"] == 6 * MIB  # the first place got what it asked for: the limit is the total


@pytest.mark.needs_root
def test_a_million_empty_files_stop_at_the_inode_budget():
    report = fill("4MiB", 0)
    assert report["files"] < 1024 and report["files error"] == 28  # ENOSPC at 4 MiB / 4 KiB inodes


@pytest.mark.needs_root
def test_control_a_budget_above_the_sum_takes_every_place_in_full():
    report = fill("512MiB", 6 * MIB)
    assert all(report[p] == 6 * MIB for p in PLACES[:-1])
    assert report["files"] == 100_000


@pytest.mark.needs_root
def test_an_ordinary_user_gets_the_same_one_budget(host_tmp: Path) -> None:
    cache = host_tmp / "cache"
    cache.mkdir()
    os.chown(cache, 65534, 65534)
    manifest = host_tmp / "contain.yaml"
    manifest.write_text(
        "version: 1\nhardening: {cgroups: off}\nresources: {disk_bytes: 8MiB}\n"
        "files:\n  - {path: /work/a, access: scratch}\n  - {path: /work/b, access: scratch}\n"
    )
    manifest.chmod(0o644)
    done = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", CONTAIN, "run",
         "--manifest", str(manifest), "--", PY, "-c", FILL, str(6 * MIB), *PLACES],
        capture_output=True, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "CONTAIN_CACHE_DIR": str(cache)},
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert sum(report[p] for p in PLACES) <= 8 * MIB and report["/dev"] == 0
    assert report["files"] < 2048


@pytest.mark.needs_root
@pytest.mark.parametrize("scratch", [[], [{"path": "/tmp", "access": "scratch"}]], ids=["default-work", "tmp"])
def test_a_write_bind_or_a_scratch_path_at_a_place_of_the_budget_still_starts(host_tmp: Path, scratch) -> None:
    shared = host_tmp / "shared"
    shared.mkdir()
    os.chown(shared, 65534, 65534)
    b = Boundary.model_validate({"files": [{"host": str(shared), "path": "/work", "access": "write"}, *scratch]})
    with Sandbox(b) as sb:  # with no scratch the default /work place is covered by the write bind
        result = sb.run(["/bin/sh", "-c", "echo x > /work/f && echo y > /tmp/g && echo $HOME"])
    assert result.exit_code == 0, result.stderr.data
    assert (shared / "f").read_text() == "x\n"
    assert result.stdout.data == (b"/tmp\n" if scratch else b"/work\n")
