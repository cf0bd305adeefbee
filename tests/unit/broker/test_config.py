"""broker.yaml: strict keys, resolved paths, action loading errors with cause and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from contain.broker import BrokerConfig, load_actions, load_config
from contain.errors import BoundaryInvalid

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "broker" / "broker.yaml"


def test_example_config_loads_with_absolute_paths_and_its_action() -> None:
    config = load_config(EXAMPLE)
    assert Path(config.storage["sqlite"]).is_absolute() and config.storage["sqlite"].endswith("examples/broker/state/broker.db")
    assert config.actions[0].options["database"].endswith("examples/broker/state/invoices.db")
    actions = load_actions(config)
    assert list(actions) == ["update_invoice"] and actions["update_invoice"].secrets == ("invoices_api_key",)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.yaml"
    path.write_text(text)
    return path


BASE = """storage: {sqlite: b.db}
socket_path: s.sock
token_key_file: t.key
grant_key_file: g.key
checkpoint_key_file: c.key
ledger_checkpoints: cps
actions: [{ref: "builtins:dict"}]
"""


def test_unknown_key_is_an_error_naming_file_and_key(tmp_path: Path) -> None:
    with pytest.raises(BoundaryInvalid) as info:
        load_config(_write(tmp_path, BASE + "tcp_prot: 80\n"))
    assert "tcp_prot" in info.value.cause and str(tmp_path) in info.value.cause


@pytest.mark.parametrize("storage", ["{mysql: x}", "{sqlite: a, postgres: b}"])
def test_storage_must_be_exactly_one_backend(tmp_path: Path, storage: str) -> None:
    with pytest.raises(BoundaryInvalid, match="storage"):
        load_config(_write(tmp_path, BASE.replace("{sqlite: b.db}", storage)))


def test_factory_that_returns_something_else_is_refused(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, BASE))
    with pytest.raises(BoundaryInvalid, match="not an Action"):
        load_actions(config)


def test_missing_module_is_refused_with_a_fix(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, BASE.replace("builtins:dict", "no_such_module_x:f")))
    with pytest.raises(BoundaryInvalid) as info:
        load_actions(config)
    assert "import_paths" in info.value.fix


def test_bad_ref_and_empty_actions_are_refused() -> None:
    with pytest.raises(ValueError):
        BrokerConfig.model_validate({"storage": {"sqlite": "x"}, "socket_path": "s", "token_key_file": "t",
                                     "grant_key_file": "g", "checkpoint_key_file": "c", "ledger_checkpoints": "l",
                                     "actions": [{"ref": "nocolon"}]})


def test_checkpoint_anchor_file_is_resolved_and_must_live_outside_the_state_directory(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    state = tmp_path / "state"
    state.mkdir()
    config = load_config(_write(state, BASE + f"checkpoint_anchor: {{file: {outside}/broker.anchors}}\n"))
    assert config.checkpoint_anchor is not None and config.checkpoint_anchor.file == f"{outside}/broker.anchors"
    assert config.checkpoint_anchor.required is True
    for inside in ("anchors", "sub/anchors"):
        with pytest.raises(BoundaryInvalid, match=r"checkpoint_anchor\.file") as info:
            load_config(_write(state, BASE + f"checkpoint_anchor: {{file: {inside}}}\n"))
        assert "whoever can rewrite those could rewrite it too" in info.value.cause


@pytest.mark.parametrize("anchor", ["{}", "{file: /a, command: [logger]}", "{command: []}", "{file: /a, typo: 1}"])
def test_checkpoint_anchor_needs_exactly_one_target(tmp_path: Path, anchor: str) -> None:
    with pytest.raises(BoundaryInvalid, match="checkpoint_anchor"):
        load_config(_write(tmp_path, BASE + f"checkpoint_anchor: {anchor}\n"))
