"""`contain review list/show/approve/deny`: hostile names, reasons and arguments print as escapes.

The JSON forms stay exact: the same hostile values come back byte for byte.
"""

from __future__ import annotations

import json

import pytest

from cli.terminal_kit import FAKE_ROW, HOSTILE, HOSTILE_SHOWN, assert_terminal_safe
from contain.boundary import ToolVerdict
from contain.cli import main
from contain.decision import Decision
from contain.gate import ReviewStore
from contain.gate.model import ToolCall


@pytest.fixture
def hostile_request(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTAIN_STATE_DIR", str(tmp_path / "state"))
    store = ReviewStore(tmp_path / "state" / "review.db")
    call = ToolCall(f"alice{HOSTILE}", f"fs{HOSTILE}", f"fs__write_file{HOSTILE}", "sha256:t",
                    {"path": f"/out/{HOSTILE}", HOSTILE: "\x85\x7f\u2066"})
    decision = Decision(ToolVerdict.REVIEW, "tools[0]", f"tools[0] (review {HOSTILE}) requires a human review")
    return store, store.submit(call, decision)


def test_list_and_show_render_every_hostile_value(hostile_request, capsysbinary):
    _store, request = hostile_request
    for argv in (["review", "list"], ["review", "list", "--all"], ["review", "show", request.request_id]):
        assert main(argv) == 0
        captured = capsysbinary.readouterr()
        out = captured.out.decode("utf-8")
        assert_terminal_safe(out + captured.err.decode("utf-8"))
        assert f"fs__write_file{HOSTILE_SHOWN}" in out  # shown, not dropped: the reviewer sees the attempt
    assert main(["review", "list"]) == 0
    assert len(capsysbinary.readouterr().out.decode().splitlines()) == 1  # one request, one row


def test_show_warns_about_and_spells_out_controls_in_arguments(hostile_request, capsys):
    _store, request = hostile_request
    assert main(["review", "show", request.request_id]) == 0
    out = capsys.readouterr().out
    assert "\\x85" in out and "\\x7f" in out and "\\u2066" in out
    assert "invisible or control character(s) in the arguments" in out


def test_approve_and_deny_confirmations_render_hostile_values(hostile_request, capsysbinary, tmp_path):
    store, request = hostile_request
    second = store.submit(ToolCall(f"bob{HOSTILE}", "fs", f"t{HOSTILE}", "sha256:t", {}),
                          Decision(ToolVerdict.REVIEW, "tools[0]", "r"))
    assert main(["review", "approve", request.request_id, "--reviewer", HOSTILE]) == 0
    assert main(["review", "deny", second.request_id, "--reason", HOSTILE, "--reviewer", HOSTILE]) == 0
    assert main(["review", "show", second.request_id]) == 0
    captured = capsysbinary.readouterr()
    assert_terminal_safe(captured.out.decode() + captured.err.decode())


def test_json_output_stays_exact(hostile_request, capsys):
    _store, request = hostile_request
    assert main(["review", "show", request.request_id, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["tool"] == f"fs__write_file{HOSTILE}"
    assert document["arguments"] == {"path": f"/out/{HOSTILE}", HOSTILE: "\x85\x7f\u2066"}
    assert main(["review", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["principal"] == f"alice{HOSTILE}"


def test_an_error_quoting_a_hostile_id_is_rendered(hostile_request, capsysbinary):
    assert main(["review", "show", f"r-{HOSTILE}"]) == 125
    err = capsysbinary.readouterr().err.decode()
    assert_terminal_safe(err)
    assert err.startswith("contain: ") and FAKE_ROW in err  # the fake row stays inside the quoted id
