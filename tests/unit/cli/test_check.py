"""`contain check`: findings that quote a hostile manifest value print as escapes, one line each."""

from __future__ import annotations

import json

from cli.terminal_kit import HOSTILE, assert_terminal_safe
from contain.cli import main


def _yaml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar, escapes included


def test_a_finding_quoting_a_hostile_bind_path_is_rendered(tmp_path, capsysbinary):
    manifest = tmp_path / "contain.yaml"
    manifest.write_text(f"version: 1\nfiles:\n  - {{host: /, path: {_yaml_string('/work/' + HOSTILE)}, access: read}}\n")
    assert main(["check", str(manifest)]) == 1
    captured = capsysbinary.readouterr()
    out = captured.out.decode()
    assert_terminal_safe(out + captured.err.decode())
    assert "CHK-004" in out and "/work/evil\\x1b[2J" in out


def test_json_keeps_the_hostile_value_exact(tmp_path, capsys):
    manifest = tmp_path / "contain.yaml"
    manifest.write_text(f"version: 1\nfiles:\n  - {{host: /, path: {_yaml_string('/work/' + HOSTILE)}, access: read}}\n")
    main(["check", str(manifest), "--format", "json"])
    assert any(HOSTILE in f["message"] for f in json.loads(capsys.readouterr().out)["findings"])


def test_a_manifest_refused_for_a_hostile_name_is_reported_rendered(tmp_path, capsysbinary):
    manifest = tmp_path / "contain.yaml"
    manifest.write_text(f"version: 1\ntools:\n  - name: {_yaml_string('w' + HOSTILE)}\n    verdict: allow\n")
    assert main(["check", str(manifest)]) == 125
    captured = capsysbinary.readouterr()
    assert_terminal_safe(captured.out.decode() + captured.err.decode())
    assert "tool name" in captured.err.decode()


def test_check_reports_the_kubernetes_section_and_what_the_render_would_refuse(tmp_path, capsys):
    manifest = tmp_path / "contain.yaml"
    manifest.write_text(
        "version: 1\ntask: Inv_1\nkubernetes: {runtime_class: kata, image: 'reg.test/tools:latest'}\n"
        "env: {HTTPS_PROXY: 'http://elsewhere.test:3128'}\n"
    )
    assert main(["check", str(manifest), "--format", "json"]) == 1
    found = {f["rule_id"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert found["CHK-022"]["severity"] == "info" and "RuntimeClass kata" in found["CHK-022"]["message"]
    assert found["CHK-023"]["severity"] == "warning"
    assert found["K8S-011"]["severity"] == "error" and found["K8S-011"]["key_path"] == "env.HTTPS_PROXY"
    assert found["K8S-012"]["severity"] == "error" and found["K8S-012"]["line"] == 2


def test_check_refuses_an_unknown_key_in_the_kubernetes_section(tmp_path, capsys):
    manifest = tmp_path / "contain.yaml"
    manifest.write_text("version: 1\nkubernetes: {runtimeClass: gvisor}\n")
    assert main(["check", str(manifest)]) == 125
    assert "kubernetes.runtimeClass" in capsys.readouterr().err
