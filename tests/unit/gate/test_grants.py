"""Grants: signed, bound to the exact call, scoped, counted; every refusal says why."""

import base64
import hashlib
import hmac as hmac_module
import json
import multiprocessing
import os
import threading

import pytest

from contain.errors import GateError
from contain.gate.grants import (
    GrantKey,
    GrantScope,
    MemoryUseCounter,
    SqliteUseCounter,
    decode_grant,
    describe_scope,
    mint_grant,
    verify_grant,
)

NOW = 1_800_000_000.0
KEY = GrantKey.from_bytes(b"k" * 32)
CALL = {"principal": "alice", "tool": "fs__write_file", "tool_digest": "sha256:t", "argument_digest": "sha256:a"}


def _mint(scope=None, key=KEY, **overrides):
    fields = {**CALL, **overrides}
    return mint_grant(
        key, scope=scope or GrantScope.once(now=NOW), reviewer="bob", reason="looks fine", now=NOW, **fields
    )


def _verify(token, uses=None, now=NOW + 1, key=KEY, **overrides):
    return verify_grant(key, token, uses=uses or MemoryUseCounter(), now=now, **{**CALL, **overrides})


def test_a_minted_grant_verifies_for_the_exact_call_and_carries_its_fields():
    token = _mint()
    assert token.startswith("cg1.") and token.count(".") == 2
    check = _verify(token)
    assert check.ok, check.reason
    grant = decode_grant(token)
    assert check.grant == grant
    assert (grant.principal, grant.tool, grant.reviewer, grant.reason) == (
        "alice",
        "fs__write_file",
        "bob",
        "looks fine",
    )
    assert grant.scope == GrantScope("once", 1, NOW + 3600)
    assert grant.issued_at == NOW


@pytest.mark.parametrize(
    ("field", "other", "words"),
    [
        ("principal", "mallory", "principal differs"),
        ("tool", "fs__delete", "tool differs"),
        ("tool_digest", "sha256:changed", "tool digest differs"),
        ("argument_digest", "sha256:other-args", "argument digest differs"),
    ],
)
def test_a_grant_for_something_else_is_refused_with_the_field_named(field, other, words):
    check = _verify(_mint(), **{field: other})
    assert not check.ok
    assert words in check.reason


def test_a_refused_mismatch_does_not_spend_the_single_use():
    counter = MemoryUseCounter()
    token = _mint()
    assert not _verify(token, uses=counter, argument_digest="sha256:x").ok
    assert counter.used(decode_grant(token).grant_id) == 0
    assert _verify(token, uses=counter).ok


def test_an_expired_grant_is_refused():
    token = _mint(scope=GrantScope.once(now=NOW, ttl_s=60))
    assert _verify(token, now=NOW + 59).ok
    check = _verify(token, now=NOW + 60)
    assert not check.ok and "expired at" in check.reason


def test_a_reused_single_use_grant_is_refused():
    counter = MemoryUseCounter()
    token = _mint()
    assert _verify(token, uses=counter).ok
    check = _verify(token, uses=counter)
    assert not check.ok and "already used 1/1" in check.reason


def test_n_uses_and_until_scopes():
    counter = MemoryUseCounter()
    token = _mint(scope=GrantScope.n_uses(3, now=NOW))
    assert [_verify(token, uses=counter).ok for _ in range(4)] == [True, True, True, False]
    until = _mint(scope=GrantScope.until(NOW + 10))
    assert all(_verify(until, uses=counter).ok for _ in range(10))
    assert not _verify(until, uses=counter, now=NOW + 10).ok


def test_forged_and_altered_grants_are_refused():
    token = _mint()
    other_key = GrantKey.from_bytes(b"x" * 32)
    assert "signature does not match" in _verify(_mint(key=other_key)).reason
    prefix, payload, mac = token.split(".")
    # Re-encode the payload with a different principal but keep the old MAC.
    import base64
    import json

    fields = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    fields["principal"] = "alice"
    fields["scope"]["uses"] = 1000
    fields["scope"]["kind"] = "uses"
    forged_payload = base64.urlsafe_b64encode(json.dumps(fields).encode()).rstrip(b"=").decode()
    assert "signature does not match" in _verify(f"{prefix}.{forged_payload}.{mac}").reason
    assert "signature does not match" in _verify(f"{prefix}.{payload}.{mac[:-2]}AA").reason


@pytest.mark.parametrize("token", ["", "cg1", "cg1.a", "cg2.a.b", "cg1.a.b.c", "cg1.!!.AA", "cg1.a.b=", 42])
def test_malformed_tokens_are_refused_not_raised(token):
    check = _verify(token)
    assert not check.ok and "malformed" in check.reason


def test_scope_values_are_checked():
    with pytest.raises(ValueError):
        GrantScope("forever", None, NOW)
    with pytest.raises(ValueError):
        GrantScope("once", 2, NOW)
    with pytest.raises(ValueError):
        GrantScope("uses", 0, NOW)
    with pytest.raises(ValueError):
        GrantScope("until", 3, NOW)


def test_describe_scope_says_how_often_and_until_when():
    assert describe_scope(GrantScope.once(now=0)) == "once, until 1970-01-01 01:00:00 UTC at the latest"
    assert describe_scope(GrantScope.n_uses(5, now=0, ttl_s=60)).startswith("up to 5 times, until 1970-01-01 00:01:00")
    assert describe_scope(GrantScope.until(0)) == "any number of times until 1970-01-01 00:00:00 UTC"


def test_key_file_is_created_0600_and_reloaded(tmp_path):
    path = tmp_path / "state" / "grant.key"
    key = GrantKey.load_or_create(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert len(path.read_bytes()) == 32
    again = GrantKey.load_or_create(path)
    token = _mint(key=key)
    assert _verify(token, key=again).ok
    assert "secret" in repr(key) and path.read_bytes().hex() not in repr(key)


def test_group_readable_or_short_or_symlinked_key_files_are_refused(tmp_path):
    path = tmp_path / "grant.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o640)
    with pytest.raises(GateError, match="chmod 600"):
        GrantKey.load_or_create(path)
    short = tmp_path / "short.key"
    short.write_bytes(b"abc")
    short.chmod(0o600)
    with pytest.raises(GateError, match="at least 32 bytes"):
        GrantKey.load_or_create(short)
    link = tmp_path / "link.key"
    link.symlink_to(short)
    with pytest.raises(GateError):
        GrantKey.load_or_create(link)


def test_sqlite_counter_counts_and_persists(tmp_path):
    db = tmp_path / "uses.db"
    counter = SqliteUseCounter(db)
    assert counter.consume("g1", 2) and counter.consume("g1", 2)
    assert not SqliteUseCounter(db).consume("g1", 2)
    assert counter.used("g1") == 2
    assert all(counter.consume("g2", None) for _ in range(5))


def test_single_use_grant_wins_once_among_racing_threads(tmp_path):
    counter = SqliteUseCounter(tmp_path / "uses.db")
    token = _mint()
    barrier = threading.Barrier(16)
    results: list[bool] = []
    lock = threading.Lock()

    def attempt():
        barrier.wait()
        ok = _verify(token, uses=counter).ok
        with lock:
            results.append(ok)

    threads = [threading.Thread(target=attempt) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 15 + [True]


def _race_in_process(db, token, start, out):
    start.wait()
    check = verify_grant(KEY, token, uses=SqliteUseCounter(db), now=NOW + 1, **CALL)
    out.put(check.ok)


def test_single_use_grant_wins_once_among_racing_processes(tmp_path):
    db = str(tmp_path / "uses.db")
    SqliteUseCounter(db)
    token = _mint()
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=_race_in_process, args=(db, token, start, out)) for _ in range(8)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sorted(results) == [False] * 7 + [True]


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), ("45", 45)])
def test_parse_duration(text, seconds):
    from contain.gate.grants import parse_duration

    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0m", "-5m", "1.5h", "10 minutes", "31d", "m"])
def test_parse_duration_refuses_odd_or_huge_values(text):
    from contain.gate.grants import parse_duration

    with pytest.raises(ValueError):
        parse_duration(text)


# ---- one canonical encoding, and nothing raised (issue 18 item 9) ------------------------------

def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signed(payload_text: str, key_bytes: bytes = b"k" * 32) -> str:
    """A grant whose MAC is correct for ``payload_text``: only the content can make it fail."""
    payload = _b64(payload_text.encode())
    mac = hmac_module.new(key_bytes, b"contain-grant-v1\x00" + payload.encode(), hashlib.sha256).digest()
    return f"cg1.{payload}.{_b64(mac)}"


def _fields(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_deeply_nested_payloads_are_refused_by_decode_and_verify_without_recursion_error():
    token = _signed('{"scope":' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(ValueError, match="deeper"):
        decode_grant(token)
    check = _verify(token)
    assert not check.ok and "deeper" in check.reason


@pytest.mark.parametrize("value", ["1" + "0" * 400, str(2**64), "1e400", "1e300", "-1"])
def test_huge_or_negative_times_are_refused_cleanly(value):
    fields = _fields(_mint())
    text = json.dumps(fields, sort_keys=True, separators=(",", ":")).replace(
        f'"issued_at":{int(NOW)}', f'"issued_at":{value}'
    )
    assert value in text
    with pytest.raises(ValueError):
        decode_grant(_signed(text))
    assert not _verify(_signed(text)).ok


def test_signed_but_non_canonical_payloads_are_refused():
    fields = _fields(_mint())
    spaced = json.dumps(fields, sort_keys=True)
    reordered = json.dumps(dict(reversed(list(fields.items()))), separators=(",", ":"))
    duplicate = '{"reason":"other",' + json.dumps(fields, sort_keys=True, separators=(",", ":"))[1:]
    for text in (spaced, reordered, duplicate):
        with pytest.raises(ValueError):
            decode_grant(_signed(text))
        assert not _verify(_signed(text)).ok


def test_only_the_canonical_base64url_of_the_mac_verifies():
    token = _mint()
    prefix, payload, mac = token.split(".")
    raw = base64.urlsafe_b64decode(mac + "=")
    # The same 32 bytes with the last character's 2 unused bits set: decoded alike before the fix.
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    index = last.index(mac[-1])
    variants = [mac[:-1] + last[index | bits] for bits in (1, 2, 3) if last[index | bits] != mac[-1]]
    assert variants and all(base64.urlsafe_b64decode(v + "=") == raw for v in variants)
    for variant in variants:
        check = _verify(f"{prefix}.{payload}.{variant}")
        assert not check.ok and "malformed" in check.reason
    assert _verify(token).ok


def test_unknown_or_missing_grant_fields_are_refused_even_when_signed():
    fields = _fields(_mint())
    extra = dict(fields, note="x")
    missing = {k: v for k, v in fields.items() if k != "reason"}
    for value in (extra, missing):
        with pytest.raises(ValueError, match=r"fields|reason"):
            decode_grant(_signed(json.dumps(value, sort_keys=True, separators=(",", ":"))))
