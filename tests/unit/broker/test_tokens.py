"""Capability tokens: mint, verify, attenuate; forged, expired, widened tokens refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from contain.broker.tokens import TokenKey, _chain, _decode, _encode, attenuate, mint_token, verify_token

KEY = TokenKey(b"k" * 32)
NOW = 1_800_000_000.0


def _token(**kw: object) -> str:
    args: dict = {"task": "t1", "principal": "alice", "actions": ["update_invoice", "read"], "ttl_s": 60, "now": NOW}
    args.update(kw)
    return mint_token(KEY, **args)  # type: ignore[arg-type]


def test_minted_token_verifies_with_its_scope() -> None:
    check = verify_token(KEY, _token(), now=NOW + 1)
    assert check.ok and check.scope is not None
    assert (check.scope.task, check.scope.principal, check.scope.actions) == ("t1", "alice", frozenset({"update_invoice", "read"}))


def test_token_from_another_key_is_forged_401() -> None:
    check = verify_token(TokenKey(b"x" * 32), _token(), now=NOW)
    assert (check.ok, check.status) == (False, 401) and "signature" in check.reason


def test_expired_token_is_401() -> None:
    check = verify_token(KEY, _token(), now=NOW + 61)
    assert (check.ok, check.status) == (False, 401) and "expired" in check.reason


@pytest.mark.parametrize("edit", ["drop_expiry", "change_principal", "widen_actions"])
def test_removing_or_editing_a_caveat_breaks_the_chain(edit: str) -> None:
    token_id, caveats, tag = _decode(_token())
    if edit == "drop_expiry":
        caveats = [c for c in caveats if "expires_at" not in c]
    elif edit == "change_principal":
        caveats = [{"principal": "bob"} if "principal" in c else c for c in caveats]
    else:
        caveats = [{"actions": ["update_invoice", "read", "delete_all"]} if "actions" in c else c for c in caveats]
    check = verify_token(KEY, _encode(token_id, caveats, tag), now=NOW)
    assert (check.ok, check.status) == (False, 401)


def test_attenuation_narrows_actions_and_expiry() -> None:
    narrowed = attenuate(attenuate(_token(), {"actions": ["read"]}), {"expires_at": NOW + 10})
    check = verify_token(KEY, narrowed, now=NOW)
    assert check.scope is not None and check.scope.actions == frozenset({"read"}) and check.scope.expires_at == NOW + 10
    assert verify_token(KEY, narrowed, now=NOW + 11).status == 401


def test_attenuating_with_a_wider_action_list_never_widens() -> None:
    widened = attenuate(_token(actions=["read"]), {"actions": ["read", "update_invoice"]})
    check = verify_token(KEY, widened, now=NOW)
    assert check.scope is not None and check.scope.actions == frozenset({"read"})


def test_attenuating_with_disjoint_actions_leaves_nothing_403() -> None:
    check = verify_token(KEY, attenuate(_token(actions=["read"]), {"actions": ["write"]}), now=NOW)
    assert (check.ok, check.status) == (False, 403)


def test_second_principal_caveat_contradicts_403() -> None:
    check = verify_token(KEY, attenuate(_token(), {"principal": "bob"}), now=NOW)
    assert (check.ok, check.status) == (False, 403)


def test_unknown_caveat_kind_is_refused_fail_closed() -> None:
    token_id, caveats, tag = _decode(_token())
    extra = {"ip": "10.0.0.1"}
    check = verify_token(KEY, _encode(token_id, [*caveats, extra], _chain(tag, [extra])), now=NOW)
    assert (check.ok, check.status) == (False, 403) and "unknown" in check.reason


def test_attenuate_refuses_unknown_caveat() -> None:
    with pytest.raises(ValueError):
        attenuate(_token(), {"admin": True})


@pytest.mark.parametrize("text", ["", "cbt1", "cbt1.x.y", "cbt2.e30.AA", "cbt1." + base64.urlsafe_b64encode(b"[]").decode() + ".AA"])
def test_malformed_tokens_are_401(text: str) -> None:
    assert verify_token(KEY, text, now=NOW).status == 401


def test_token_body_is_canonical_json_with_all_four_caveats() -> None:
    body = json.loads(base64.urlsafe_b64decode(_token().split(".")[1] + "=="))
    assert [next(iter(c)) for c in body["caveats"]] == ["task", "principal", "actions", "expires_at"]


def test_key_file_created_0600_and_refused_when_group_readable(tmp_path: Path) -> None:
    path = tmp_path / "token.key"
    key = TokenKey.load_or_create(path)
    assert path.stat().st_mode & 0o777 == 0o600 and len(path.read_bytes()) == 32
    assert verify_token(TokenKey.load_or_create(path), mint_token(key, task="t", principal="p", actions=["a"], ttl_s=5)).ok
    path.chmod(0o640)
    with pytest.raises(PermissionError):
        TokenKey.load_or_create(path)
    assert "secret" in repr(key) and "kkk" not in repr(KEY)
