"""The review page's logic, without sockets: token, session, CSRF, Host, escaping, decisions."""

import re
from urllib.parse import urlencode

import pytest

from contain.boundary import ToolVerdict
from contain.gate.grants import GrantKey, decode_grant
from contain.gate.model import Decision, ToolCall
from contain.gate.store import RequestStatus, ReviewStore
from contain.gate.web import COOKIE_NAME, ReviewApp, render_arguments, scope_from_form

HOST = "127.0.0.1:9999"
NOW = 1_800_000_000.0
REVIEW = Decision(ToolVerdict.REVIEW, "tools[0]", "tools[0] requires a human review")


@pytest.fixture
def store(tmp_path):
    return ReviewStore(tmp_path / "review.db", clock=lambda: NOW)


@pytest.fixture
def app(store):
    return ReviewApp(store=store, key=GrantKey.from_bytes(b"w" * 32), token="secret-token", reviewer="web:test",
                     allowed_hosts=frozenset({HOST}))


def _submit(store, **arguments):
    call = ToolCall("alice", "fs", "fs__write_file", "sha256:tool", arguments or {"path": "/out/a", "content": "x"})
    return store.submit(call, REVIEW)


def _get(app, path, cookie=None, **headers):
    h = {"host": HOST, **headers}
    if cookie:
        h["cookie"] = f"{COOKIE_NAME}={cookie}"
    return app.handle("GET", path, h, b"")


def _post(app, path, form, cookie=None, **headers):
    h = {"host": HOST, **headers}
    if cookie:
        h["cookie"] = f"{COOKIE_NAME}={cookie}"
    return app.handle("POST", path, h, urlencode(form).encode())


def _login(app):
    response = _post(app, "/login", {"token": "secret-token"})
    assert response.status == 303
    cookie = dict(response.headers)["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    return re.match(rf"{COOKIE_NAME}=([^;]+)", cookie).group(1)


def _csrf(body: bytes) -> str:
    return re.search(rb"name='csrf' value='([0-9a-f]+)'", body).group(1).decode()


def test_without_the_token_nothing_is_shown_or_decided(app, store):
    request = _submit(store)
    assert _get(app, "/").status == 303
    assert dict(_get(app, "/").headers)["Location"] == "/login"
    assert _post(app, "/login", {"token": "wrong"}).status == 401
    assert _get(app, "/", cookie="made-up-session").status == 303
    assert _post(app, f"/requests/{request.request_id}/approve", {"scope": "once"}).status == 401
    assert store.get(request.request_id).status is RequestStatus.PENDING


def test_login_then_approve_once_with_csrf(app, store):
    request = _submit(store)
    session = _login(app)
    page = _get(app, "/", cookie=session)
    assert page.status == 200
    assert request.request_id.encode() in page.body
    assert request.argument_digest.encode() in page.body
    assert b"one time, within an hour" in page.body
    csrf = _csrf(page.body)
    # Without CSRF: refused.
    assert _post(app, f"/requests/{request.request_id}/approve", {"scope": "once"}, cookie=session).status == 403
    response = _post(app, f"/requests/{request.request_id}/approve", {"scope": "once", "csrf": csrf}, cookie=session)
    assert response.status == 303
    approved = store.get(request.request_id)
    assert approved.status is RequestStatus.APPROVED
    assert approved.reviewer == "web:test"
    assert decode_grant(approved.grant_token).scope.kind == "once"


def test_bearer_header_works_and_csrf_is_still_required(app, store):
    request = _submit(store)
    page = _get(app, "/", authorization="Bearer secret-token")
    assert page.status == 200
    csrf = _csrf(page.body)
    assert _post(app, f"/requests/{request.request_id}/deny", {"reason": "no"}, authorization="Bearer secret-token").status == 403
    response = _post(app, f"/requests/{request.request_id}/deny", {"reason": "no", "csrf": csrf},
                     authorization="Bearer secret-token")
    assert response.status == 303
    assert store.get(request.request_id).status is RequestStatus.DENIED
    assert _get(app, "/", authorization="Bearer wrong").status == 303


def test_csrf_of_another_session_is_refused(app, store):
    request = _submit(store)
    first, second = _login(app), _login(app)
    csrf_first = _csrf(_get(app, "/", cookie=first).body)
    response = _post(app, f"/requests/{request.request_id}/approve", {"scope": "once", "csrf": csrf_first}, cookie=second)
    assert response.status == 403


def test_wrong_host_and_cross_origin_posts_are_refused(app, store):
    request = _submit(store)
    session = _login(app)
    csrf = _csrf(_get(app, "/", cookie=session).body)
    assert _get(app, "/", cookie=session, host="evil.example:9999").status == 421
    response = _post(app, f"/requests/{request.request_id}/approve", {"scope": "once", "csrf": csrf}, cookie=session,
                     origin="http://evil.example")
    assert response.status == 403
    assert store.get(request.request_id).status is RequestStatus.PENDING


def test_deny_without_reason_is_refused(app, store):
    request = _submit(store)
    session = _login(app)
    csrf = _csrf(_get(app, "/", cookie=session).body)
    response = _post(app, f"/requests/{request.request_id}/deny", {"reason": "", "csrf": csrf}, cookie=session)
    assert response.status == 400 and b"needs a reason" in response.body
    assert store.get(request.request_id).status is RequestStatus.PENDING


def test_arguments_are_escaped_and_invisible_characters_shown(app, store):
    _submit(store, path="/out/<script>alert(1)</script>", content="ok\u200bhidden\u202e")
    session = _login(app)
    body = _get(app, "/", cookie=session).body.decode()
    assert "<script>alert" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "\\u200b" in body and "\\u202e" in body and "\u200b" not in body
    assert "2 invisible character(s)" in body


def test_logout_ends_the_session(app, store):
    session = _login(app)
    csrf = _csrf(_get(app, "/", cookie=session).body)
    assert _post(app, "/logout", {"csrf": csrf}, cookie=session).status == 303
    assert _get(app, "/", cookie=session).status == 303


def test_render_arguments_counts_invisible_characters():
    text, count = render_arguments({"a": "x\u2066y\U000e0041"})
    assert count == 2 and "\\u2066" in text and "\\U000e0041" in text


def test_scope_from_form():
    assert scope_from_form({"scope": "once"}, now=0).uses == 1
    assert scope_from_form({"scope": "uses", "uses": "4"}, now=0).uses == 4
    until = scope_from_form({"scope": "for", "duration": "10m"}, now=100)
    assert (until.kind, until.expires_at) == ("until", 700)
    for bad in ({"scope": "uses", "uses": "0"}, {"scope": "uses", "uses": "x"}, {"scope": "for", "duration": "forever"},
                {"scope": "always"}):
        with pytest.raises(ValueError):
            scope_from_form(bad, now=0)


def test_origin_null_is_refused(app, store):
    request = _submit(store)
    session = _login(app)
    csrf = _csrf(_get(app, "/", cookie=session).body)
    response = _post(app, f"/requests/{request.request_id}/approve", {"scope": "once", "csrf": csrf}, cookie=session,
                     origin="null")
    assert response.status == 403


def test_the_server_binds_ipv4_loopback_only(store):
    from contain.errors import GateError
    from contain.gate.web import make_review_server

    key = GrantKey.from_bytes(b"w" * 32)
    for host in ("0.0.0.0", "192.168.1.1", "::1", "localhost"):
        with pytest.raises(GateError, match="loopback only"):
            make_review_server(store, key, host=host)
    server, app = make_review_server(store, key, host="127.0.0.1", port=0)
    try:
        port = server.server_address[1]
        assert app.allowed_hosts == frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})
        assert len(app.token) >= 40
    finally:
        server.server_close()


def test_the_page_reflects_nothing_from_the_url_and_shows_the_outcome_once(app, store):
    request = _submit(store)
    session = _login(app)
    assert b"Approved by the admin" not in _get(app, "/?msg=Approved+by+the+admin", cookie=session).body
    csrf = _csrf(_get(app, "/", cookie=session).body)
    _post(app, f"/requests/{request.request_id}/deny", {"reason": "no", "csrf": csrf}, cookie=session)
    assert f"{request.request_id} denied".encode() in _get(app, "/", cookie=session).body
    assert b"id='message'" not in _get(app, "/", cookie=session).body
