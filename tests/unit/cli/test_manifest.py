"""`contain check-manifest`: the manifest path and the task name print as escapes."""

from __future__ import annotations

from cli.terminal_kit import assert_terminal_safe
from contain.cli import main


def test_a_hostile_manifest_file_name_is_rendered(tmp_path, capsysbinary):
    manifest = tmp_path / "m\x1b[2J\x1b]52;c;ZXZpbA==\x07\u202e\nr-000000000000 fake.yaml"
    manifest.write_text("version: 1\ntask: t\n")
    assert main(["check-manifest", str(manifest)]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert_terminal_safe(out)
    assert "m\\x1b[2J" in out and len(out.splitlines()) == 1
