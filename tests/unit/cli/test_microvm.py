"""`contain microvm snapshot show|clear` over a snapshot directory of fake templates (building one
boots QEMU: integration/test_microvm_snapshot.py and docs/benchmarks.md)."""

from __future__ import annotations

import json
import os

import pytest

from contain.cli import main
from contain.runtime.microvm.snapshot import open_snapshot_dir
from contain.runtime.microvm.snapshot_plan import snapshot_file_name

KEY = "0123456789abcdef01234567"


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("CONTAIN_CACHE_DIR", str(tmp_path))
    fd = open_snapshot_dir()
    for name, data in (
        (snapshot_file_name(KEY), b"x" * 2 * 1024 * 1024),
        (
            snapshot_file_name(KEY).replace(".vmstate", ".json"),
            json.dumps(
                {"key": KEY, "built_at": 0.0, "memory_mib": 416, "vcpus": 1, "accel": "tcg", "boot_s": 7.1, "save_s": 0.7}
            ).encode(),
        ),
    ):
        out = os.open(name, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd)
        os.write(out, data)
        os.close(out)
    yield fd
    os.close(fd)


def test_show_lists_each_template_with_its_size_and_vm(cache, capsys):
    assert main(["microvm", "snapshot", "show"]) == 0
    assert capsys.readouterr().out == (
        f"{KEY}  2.0 MiB  416 MiB RAM  1 vCPU  tcg  built 1970-01-01 00:00:00 UTC (boot 7.1 s, save 0.7 s)\n"
    )


def test_show_json_is_exact(cache, capsys):
    assert main(["microvm", "snapshot", "show", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert (entry["key"], entry["bytes"], entry["accel"]) == (KEY, 2 * 1024 * 1024, "tcg")


def test_clear_removes_them_and_show_then_says_so(cache, capsys):
    assert main(["microvm", "snapshot", "clear"]) == 0
    assert os.listdir(cache) == []
    assert main(["microvm", "snapshot", "show"]) == 0
    assert capsys.readouterr().out == "removed 1 microVM template(s)\nno microVM templates cached\n"


def test_an_action_is_required(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["microvm", "snapshot"])
    assert exited.value.code == 2
