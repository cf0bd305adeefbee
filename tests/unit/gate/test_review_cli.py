"""`contain review`: list, show, approve with a scope, deny with a reason, default paths."""

import json
import os

import pytest

from contain.boundary import ToolVerdict
from contain.cli import main
from contain.decision import Decision
from contain.gate import GrantKey, ReviewState, ReviewStore, decode_grant, default_state_dir
from contain.gate.model import ToolCall

REVIEW = Decision(ToolVerdict.REVIEW, "tools[0]", "tools[0] requires a human review")


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTAIN_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _submit(state, path="/out/a"):
    store = ReviewStore(state / "review.db")
    return store, store.submit(ToolCall("alice", "fs", "fs__write_file", "sha256:t", {"path": path}), REVIEW)


def test_list_show_approve_uses(state, capsys):
    store, request = _submit(state)
    assert main(["review", "list"]) == 0
    assert request.request_id in capsys.readouterr().out
    assert main(["review", "show", request.request_id]) == 0
    out = capsys.readouterr().out
    assert '"path": "/out/a"' in out and request.argument_digest in out
    assert main(["review", "approve", request.request_id, "--uses", "3", "--reason", "fine", "--reviewer", "bob"]) == 0
    assert "up to 3 times" in capsys.readouterr().out
    approved = store.get(request.request_id)
    assert approved.status is ReviewState.APPROVED and approved.reviewer == "bob"
    assert decode_grant(approved.grant_token).scope.uses == 3
    key_file = state / "grant.key"
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    assert GrantKey.load_or_create(key_file)  # the key that signed is the one on disk
    assert main(["review", "list"]) == 0
    assert "no pending requests" in capsys.readouterr().out
    assert main(["review", "list", "--all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["status"] == "approved"


def test_approve_for_a_duration_and_deny(state, capsys):
    store, first = _submit(state, "/a")
    _, second = _submit(state, "/b")
    assert main(["review", "approve", first.request_id, "--for", "10m"]) == 0
    grant = decode_grant(store.get(first.request_id).grant_token)
    assert grant.scope.kind == "until" and 590 < grant.scope.expires_at - grant.issued_at <= 600
    assert main(["review", "deny", second.request_id, "--reason", "not in the plan"]) == 0
    assert store.get(second.request_id).review_reason == "not in the plan"


def test_errors_are_rendered_with_a_fix(state, capsys):
    _submit(state)
    assert main(["review", "show", "r-missing"]) == 125
    err = capsys.readouterr().err
    assert "no review request 'r-missing'" in err and "fix:" in err
    assert main(["review", "approve", "r-missing", "--for", "forever"]) == 125


def test_default_state_dir_rules():
    assert str(default_state_dir({"CONTAIN_STATE_DIR": "/x"}, euid=0)) == "/x"
    assert str(default_state_dir({}, euid=0)) == "/var/lib/contain"
    assert str(default_state_dir({"HOME": "/home/u"}, euid=1000)) == "/home/u/.local/state/contain"
    assert str(default_state_dir({"HOME": "/home/u", "XDG_STATE_HOME": "/s"}, euid=1000)) == "/s/contain"
