"""`contain probe`: exit status, --json on stdout, progress on stderr, the HTML report."""

from __future__ import annotations

import json

import pytest

from contain.cli import main

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]


def test_probe_json_and_html_for_selected_cases(host_tmp, capsys):
    html = host_tmp / "report.html"
    code = main(["probe", "--cases", "FS-01,XT-07", "--json", "--report", str(html)])
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert code == 0
    assert [r["case_id"] for r in document["results"]] == ["FS-01", "XT-07"]
    assert [r["verdict"] for r in document["results"]] == ["CONTAINED", "NOT_APPLICABLE"]
    assert document["target"] == "contain:process"
    assert "[  1/2] FS-01  CONTAINED" in err
    assert html.read_text().startswith("<!DOCTYPE html>")


def test_probe_exits_1_when_a_wrapped_sandbox_leaks(capsys):
    code = main(["probe", "--cases", "FS-01", "--wrap", "bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc"])
    out, _ = capsys.readouterr()
    assert code == 1
    assert "FAIL" in out


def test_probe_refuses_a_selection_that_matches_nothing(capsys):
    assert main(["probe", "--cases", "ZZ-*"]) == 2
    assert "matches no case" in capsys.readouterr().err


def test_probe_refuses_a_backend_that_does_not_exist(capsys):
    assert main(["probe", "--backend", "container:gvisor", "--cases", "FS-01"]) == 125
    err = capsys.readouterr().err
    assert "container runtime 'gvisor' is unknown" in err and "container:runc, container:runsc" in err
