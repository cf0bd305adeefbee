"""Fuzzing capability tokens (broker/tokens.py) and grants (gate/grants.py).

Properties: verification never raises; any mutation of a valid token's text fails verification;
only the canonical encoding decodes, so decode -> encode reproduces the exact text; bodies with
any JSON inside (huge numbers, deep nesting, duplicate keys) are refused cleanly, even when the
MAC over them is correct.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json

from hypothesis import example, given
from hypothesis import strategies as st

from contain.broker.tokens import TokenKey, _decode, _encode, mint_token, verify_token
from contain.gate.grants import GrantKey, GrantScope, MemoryUseCounter, decode_grant, mint_grant, verify_grant

NOW = 1_800_000_000.0
TOKEN_KEY = TokenKey(b"t" * 32)
GRANT_KEY = GrantKey.from_bytes(b"g" * 32)
CALL = {"principal": "alice", "tool": "fs__write", "tool_digest": "sha256:t", "argument_digest": "sha256:a"}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@st.composite
def mutations(draw: st.DrawFn, text: str) -> str:
    """``text`` with one to three edits: replace, insert or delete a character, or flip a bit."""
    out = text
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, max(len(out) - 1, 0)))
        op = draw(st.sampled_from(["replace", "insert", "delete", "flip", "pad", "space"]))
        char = draw(st.one_of(st.sampled_from(list("Aa0-_+/=.\n \t")), st.characters(codec="utf-8")))
        if op == "replace" and out:
            out = out[:i] + char + out[i + 1 :]
        elif op == "insert":
            out = out[:i] + char + out[i:]
        elif op == "delete" and out:
            out = out[:i] + out[i + 1 :]
        elif op == "flip" and out:
            out = out[:i] + chr(ord(out[i]) ^ (1 << draw(st.integers(0, 6)))) + out[i + 1 :]
        elif op == "pad":
            out += "="
        else:
            out = " " + out
    return out


def a_token(task: str = "t1") -> str:
    return mint_token(TOKEN_KEY, task=task, principal="alice", actions=["read", "write"], ttl_s=60, now=NOW)


def a_grant() -> str:
    return mint_grant(GRANT_KEY, scope=GrantScope.n_uses(3, now=NOW), reviewer="bob", reason="ok", now=NOW, **CALL)


TOKEN = a_token()
GRANT = a_grant()


@given(mutations(TOKEN))
@example(" " + TOKEN)
@example(TOKEN + "\n")
@example(TOKEN + "=")
@example(TOKEN.replace("-", "+").replace("_", "/"))
def test_any_mutation_of_a_valid_token_fails_verification(mutated: str) -> None:
    check = verify_token(TOKEN_KEY, mutated, now=NOW + 1)
    assert check.ok is (mutated == TOKEN)
    if not check.ok:
        assert check.status in (401, 403) and check.reason


@given(mutations(GRANT))
@example(GRANT + "=")
@example(GRANT[:-1] + chr(ord(GRANT[-1]) ^ 1))
def test_any_mutation_of_a_valid_grant_fails_verification(mutated: str) -> None:
    check = verify_grant(GRANT_KEY, mutated, uses=MemoryUseCounter(), now=NOW + 1, **CALL)
    assert check.ok is (mutated == GRANT)


@given(st.text(max_size=120))
def test_verification_of_any_text_never_raises(text: str) -> None:
    assert not verify_token(TOKEN_KEY, text, now=NOW).ok
    assert not verify_grant(GRANT_KEY, text, uses=MemoryUseCounter(), now=NOW, **CALL).ok
    with contextlib.suppress(ValueError):
        decode_grant(text)


@given(st.sampled_from(["t1", "a-b", "x" * 40, "\u00e9t\u00e9"]))
def test_decoding_then_encoding_a_token_reproduces_its_exact_text(task: str) -> None:
    token = a_token(task)
    token_id, caveats, tag = _decode(token)
    assert _encode(token_id, caveats, tag) == token


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=10),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)
CANONICAL = {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False}
body_texts = st.one_of(
    json_values.map(lambda v: json.dumps({"caveats": [{"expires_at": v}], "id": "x"})),
    json_values.map(
        lambda v: json.dumps(
            {"caveats": [{"task": "t"}, {"principal": "p"}, {"actions": ["a"]}, {"expires_at": v}], "id": "x"},
            **CANONICAL,
        )
    ),
    json_values.map(lambda v: json.dumps({"caveats": [{"task": v}], "id": "x"}, **CANONICAL)),
    json_values.map(json.dumps),
    st.sampled_from(
        [
            '{"caveats":' + "[" * 2000 + "]" * 2000 + ',"id":"x"}',
            '{"caveats":[{"expires_at":1' + "0" * 400 + '}],"id":"x"}',
            '{"caveats":[],"caveats":[{"task":"t"}],"id":"x"}',
        ]
    ),
)


def chained_token(body_text: str) -> str:
    """A token whose tag is the correct chain over whatever caveats the body holds, when it can be
    computed the way the broker would (so the body alone decides)."""
    tag = b"\x00" * 32
    try:
        body = json.loads(body_text)
        tag = TOKEN_KEY.root_tag(body["id"])
        for caveat in body["caveats"]:
            text = json.dumps(caveat, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            tag = hmac.new(tag, text.encode(), hashlib.sha256).digest()
    except (ValueError, TypeError, KeyError, RecursionError, UnicodeError):
        pass
    return f"cbt1.{b64(body_text.encode('utf-8', 'surrogatepass'))}.{b64(tag)}"


@given(body_texts)
@example('{"caveats":[{"task":"t"},{"principal":"p"},{"actions":["a"]},{"expires_at":1900000000}],"id":"x"}')
def test_token_bodies_of_any_shape_are_refused_or_accepted_never_raised(body_text: str) -> None:
    check = verify_token(TOKEN_KEY, chained_token(body_text), now=NOW)
    if check.ok:  # only a complete, canonical, unexpired body with a correct chain
        assert check.scope is not None and NOW < check.scope.expires_at <= 253402300799
        assert chained_token(body_text).split(".")[1] == b64(body_text.encode())
    else:
        assert check.status in (401, 403) and check.reason


def signed_grant(payload_text: str) -> str:
    payload = b64(payload_text.encode("utf-8", "surrogatepass"))
    mac = hmac.new(b"g" * 32, b"contain-grant-v1\x00" + payload.encode(), hashlib.sha256).digest()
    return f"cg1.{payload}.{b64(mac)}"


@given(body_texts)
@example('{"scope":' + "[" * 3000 + "]" * 3000 + "}")
@example(json.dumps({"issued_at": 10**400}))
def test_signed_grant_payloads_of_any_shape_are_refused_cleanly(payload_text: str) -> None:
    token = signed_grant(payload_text)
    with contextlib.suppress(ValueError):
        decode_grant(token)
    assert not verify_grant(GRANT_KEY, token, uses=MemoryUseCounter(), now=NOW, **CALL).ok
