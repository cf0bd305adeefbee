"""`attachments_for`: the token is scoped to the boundary; three attachments under /.contain."""

from __future__ import annotations

import pytest

from contain.boundary import Boundary
from contain.broker import attachments_for, client_script_bytes, token_for, verify_token
from contain.broker.tokens import TokenKey
from contain.errors import BoundaryInvalid

KEY = TokenKey(b"s" * 32)


def _boundary(**extra: object) -> Boundary:
    return Boundary.model_validate({"task": "inv", "principal": "alice", "records": [
        {"name": "invoices", "actions": ["update_invoice"]}, {"name": "notes", "actions": ["add_note", "update_invoice"]}],
        **extra})


def test_attachments_carry_token_socket_and_client() -> None:
    atts = attachments_for(_boundary(), socket_path="/run/broker.sock", token_key=KEY, ttl_s=60)
    assert [(a.sandbox_path, a.host_path) for a in atts] == [
        ("/.contain/broker-token", None), ("/.contain/broker.sock", "/run/broker.sock"), ("/.contain/broker-client", None)]
    assert atts[2].data == client_script_bytes()
    assert atts[0].data is not None
    scope = verify_token(KEY, atts[0].data.decode().strip()).scope
    assert scope is not None and (scope.task, scope.principal) == ("inv", "alice")
    assert scope.actions == frozenset({"update_invoice", "add_note"})
    for a in atts:
        a.validate()


def test_token_expires_after_ttl() -> None:
    token = token_for(_boundary(), token_key=KEY, ttl_s=30, now=1000.0)
    assert verify_token(KEY, token, now=1029.0).ok and verify_token(KEY, token, now=1030.0).status == 401


@pytest.mark.parametrize(("data", "words"), [
    ({"task": "t", "principal": "alice"}, "no records"),
    ({"task": "t", "records": [{"name": "i", "actions": ["a"]}]}, "no principal"),
])
def test_no_token_without_records_or_principal(data: dict, words: str) -> None:
    with pytest.raises(BoundaryInvalid, match=words):
        token_for(Boundary.model_validate(data), token_key=KEY, ttl_s=60)


def test_package_exports_resolve_and_are_sorted() -> None:
    import contain.broker as pkg

    assert pkg.__all__ == sorted(pkg.__all__)
    for name in pkg.__all__:
        assert getattr(pkg, name) is not None


def test_attachments_from_config_use_its_socket_and_key(tmp_path) -> None:
    from contain.broker.sandbox_link import attachments_from_config

    (tmp_path / "broker.yaml").write_text("storage: {sqlite: b.db}\nsocket_path: run/b.sock\ntoken_key_file: t.key\n"
                                          "grant_key_file: g.key\ncheckpoint_key_file: c.key\nledger_checkpoints: cps\n"
                                          "actions: [{ref: 'x:y'}]\n")
    atts = attachments_from_config(_boundary(), tmp_path / "broker.yaml", ttl_s=60)
    assert atts[1].host_path == str(tmp_path / "run" / "b.sock")
    assert atts[0].data is not None
    assert verify_token(TokenKey.load_or_create(tmp_path / "t.key"), atts[0].data.decode().strip()).ok
