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
    assert (check.scope.task, check.scope.principal, check.scope.actions) == (
        "t1",
        "alice",
        frozenset({"update_invoice", "read"}),
    )


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


@pytest.mark.parametrize(
    "text", ["", "cbt1", "cbt1.x.y", "cbt2.e30.AA", "cbt1." + base64.urlsafe_b64encode(b"[]").decode() + ".AA"]
)
def test_malformed_tokens_are_401(text: str) -> None:
    assert verify_token(KEY, text, now=NOW).status == 401


def test_token_body_is_canonical_json_with_all_four_caveats() -> None:
    body = json.loads(base64.urlsafe_b64decode(_token().split(".")[1] + "=="))
    assert [next(iter(c)) for c in body["caveats"]] == ["task", "principal", "actions", "expires_at"]


def test_key_file_created_0600_and_refused_when_group_readable(tmp_path: Path) -> None:
    path = tmp_path / "token.key"
    key = TokenKey.load_or_create(path)
    assert path.stat().st_mode & 0o777 == 0o600 and len(path.read_bytes()) == 32
    assert verify_token(
        TokenKey.load_or_create(path), mint_token(key, task="t", principal="p", actions=["a"], ttl_s=5)
    ).ok
    path.chmod(0o640)
    with pytest.raises(PermissionError):
        TokenKey.load_or_create(path)
    assert "secret" in repr(key) and "kkk" not in repr(KEY)


# ---- one canonical encoding (issue 18 item 9) -------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _reencoded(token: str, body_text: str) -> str:
    prefix, _body, tag = token.split(".")
    return f"{prefix}.{_b64(body_text.encode())}.{tag}"


def _spellings_of(token: str) -> dict[str, str]:
    """Other texts that the pre-fix decoder read as the same token (issue 18 item 9)."""
    prefix, body, tag = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    caveats, token_id = json.dumps(decoded["caveats"], **compact), json.dumps(decoded["id"])
    expiry = decoded["caveats"][3]["expires_at"]
    return {
        "leading whitespace": " " + token,
        "trailing newline": token + "\n",
        "padding on the body": f"{prefix}.{body}{'=' * (-len(body) % 4) or '=='}.{tag}",
        "padding on the tag": f"{prefix}.{body}.{tag}=",
        "+ and / for - and _": f"{prefix}.{body}.{tag.replace('-', '+').replace('_', '/')}",
        "junk characters": f"{prefix}.{body}.{tag[:5]}!!!!{tag[5:]}",
        "whitespace inside": f"{prefix}.{body}.{tag[:5]}\t\t\t\t{tag[5:]}",
        "unused bits set": f"{prefix}.{body}.{tag[:-1]}{chr(ord(tag[-1]) ^ 1)}",
        "spaced JSON": _reencoded(token, json.dumps(decoded)),
        "reordered keys": _reencoded(token, '{"id":' + token_id + ',"caveats":' + caveats + "}"),
        "duplicate key, last wins": _reencoded(token, '{"caveats":[],"caveats":' + caveats + ',"id":' + token_id + "}"),
        "float spelling": _reencoded(
            token,
            '{"caveats":' + caveats.replace(json.dumps(expiry), f"{float(expiry)!r}0") + ',"id":' + token_id + "}",
        ),
    }


def _token_with_dash_or_underscore_in_its_tag() -> str:
    for _ in range(200):  # about 3 in 4 tags have one; 200 misses in a row do not happen
        token = _token()
        if "-" in token.split(".")[2] or "_" in token.split(".")[2]:
            return token
    raise AssertionError("no tag with - or _ in 200 tokens")


SPELLINGS = sorted(_spellings_of(_token()))


@pytest.mark.parametrize("name", SPELLINGS)
def test_only_the_canonical_spelling_of_a_token_verifies(name: str) -> None:
    token = _token_with_dash_or_underscore_in_its_tag()
    assert verify_token(KEY, token, now=NOW + 1).ok
    other = _spellings_of(token)[name]
    assert other != token
    check = verify_token(KEY, other, now=NOW + 1)
    assert (check.ok, check.status) == (False, 401), check.reason


def test_deeply_nested_bodies_are_refused_not_raised() -> None:
    body = '{"caveats":' + "[" * 2000 + "]" * 2000 + ',"id":"x"}'
    check = verify_token(KEY, f"cbt1.{_b64(body.encode())}.{_b64(b'x' * 32)}", now=NOW)
    assert (check.ok, check.status) == (False, 401) and "deeper" in check.reason


@pytest.mark.parametrize("value", ["1" + "0" * 400, "1e400", str(2**64)])
def test_a_huge_expiry_caveat_is_refused_cleanly(value: str) -> None:
    token_id = "abc"
    caveats_text = '[{"task":"t"},{"principal":"p"},{"actions":["a"]},{"expires_at":' + value + "}]"
    body = '{"caveats":' + caveats_text + ',"id":"abc"}'
    # A correct chain over the huge caveat, so only the number itself can be the reason for refusal.
    tag = KEY.root_tag(token_id)
    import hashlib
    import hmac

    for caveat in ('{"task":"t"}', '{"principal":"p"}', '{"actions":["a"]}', '{"expires_at":' + value + "}"):
        tag = hmac.new(tag, caveat.encode(), hashlib.sha256).digest()
    check = verify_token(KEY, f"cbt1.{_b64(body.encode())}.{_b64(tag)}", now=NOW)
    assert not check.ok and check.status in (401, 403)


def test_a_huge_integer_expiry_inside_64_bits_is_refused_as_a_malformed_caveat() -> None:
    caveats = [{"task": "t"}, {"principal": "p"}, {"actions": ["a"]}, {"expires_at": 2**63}]
    token = _encode("abc", caveats, _chain(KEY.root_tag("abc"), caveats))
    check = verify_token(KEY, token, now=NOW)
    assert (check.ok, check.status) == (False, 403) and "expires_at" in check.reason


def test_verify_token_never_raises_even_for_non_strings() -> None:
    for bad in (None, 5, b"cbt1.x.y", "cbt1." + "A" * 9000):
        check = verify_token(KEY, bad, now=NOW)  # type: ignore[arg-type]
        assert (check.ok, check.status) == (False, 401)


def test_decode_rejects_a_short_tag() -> None:
    prefix, body, _tag = _token().split(".")
    with pytest.raises(ValueError, match="tag"):
        _decode(f"{prefix}.{body}.{_b64(b'x' * 31)}")
