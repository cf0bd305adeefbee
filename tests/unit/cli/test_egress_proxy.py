"""`contain egress-proxy`: a bad address or configuration is refused with exit 125 before anything listens."""

from __future__ import annotations

from pathlib import Path

from contain.cli import main


def test_a_listen_address_that_is_a_name_is_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "egress.json"
    config.write_text('{"version": 1}')
    assert main(["egress-proxy", "--config", str(config), "--listen", "localhost:3128"]) == 125
    assert "numeric HOST:PORT" in capsys.readouterr().err


def test_an_invalid_configuration_is_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "egress.json"
    config.write_text('{"version": 1, "network": {"allow": [{"host": "*.com"}]}}')
    assert main(["egress-proxy", "--config", str(config), "--listen", "127.0.0.1:3128"]) == 125
    assert "network.allow" in capsys.readouterr().err
