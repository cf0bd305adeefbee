"""The review page's logic, without sockets: token, session, CSRF, Host, escaping, decisions."""

import re
from urllib.parse import urlencode

import pytest

from contain.boundary import ToolVerdict
from contain.decision import Decision
from contain.gate.grants import GrantKey, decode_grant
from contain.gate.model import ToolCall
from contain.gate.store import ReviewState, ReviewStore
from contain.gate.web import COOKIE_NAME, ReviewApp, render_arguments, scope_from_form

HOST = "127.0.0.1:9999"
ORIGIN = f"http://{HOST}"
CAP = "C" * 43  # the capability path segment of the app under test
P = f"/{CAP}/"
NOW = 1_800_000_000.0
REVIEW = Decision(ToolVerdict.REVIEW, "tools[0]", "tools[0] requires a human review")


@pytest.fixture
def store(tmp_path):
    return ReviewStore(tmp_path / "review.db", clock=lambda: NOW)


@pytest.fixture
def app(store):
    return ReviewApp(store=store, key=GrantKey.from_bytes(b"w" * 32), token="secret-token", bound_host=HOST,
                     reviewer="web:test", capability=CAP)


def _submit(store, **arguments):
    call = ToolCall("alice", "fs", "fs__write_file", "sha256:tool", arguments or {"path": "/out/a", "content": "x"})
    return store.submit(call, REVIEW)


def _headers(base, cookie, headers):
    # keyword names use _ for -, a value of None removes the header (sec_fetch_site=..., origin=None)
    h = {**base, **{k.replace("_", "-"): v for k, v in headers.items()}}
    if cookie:
        h["cookie"] = f"{COOKIE_NAME}={cookie}"
    return {k: v for k, v in h.items() if v is not None}


def _get(app, route, cookie=None, *, path=None, **headers):
    """GET ``route`` below the capability (or the raw ``path``), as a browser would on this page."""
    return app.handle("GET", path or P + route.lstrip("/"), _headers({"host": HOST}, cookie, headers), b"")


def _post(app, route, form, cookie=None, *, path=None, **headers):
    """POST a form as this page's own form would: Host and Origin of this server."""
    h = _headers({"host": HOST, "origin": ORIGIN}, cookie, headers)
    return app.handle("POST", path or P + route.lstrip("/"), h, urlencode(form).encode())


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
    assert dict(_get(app, "/").headers)["Location"] == f"{P}login"
    assert _post(app, "/login", {"token": "wrong"}).status == 401
    assert _get(app, "/", cookie="made-up-session").status == 303
    assert _post(app, f"/requests/{request.request_id}/approve", {"scope": "once"}).status == 401
    assert store.get(request.request_id).status is ReviewState.PENDING


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
    assert approved.status is ReviewState.APPROVED
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
    assert store.get(request.request_id).status is ReviewState.DENIED
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
    for host in ("evil.example:9999", "localhost:9999", "127.0.0.1:6666", "127.0.0.2:9999", None):
        assert _get(app, "/", cookie=session, host=host).status == 421
    response = _post(app, f"/requests/{request.request_id}/approve", {"scope": "once", "csrf": csrf}, cookie=session,
                     origin="http://evil.example")
    assert response.status == 403
    assert store.get(request.request_id).status is ReviewState.PENDING


def test_deny_without_reason_is_refused(app, store):
    request = _submit(store)
    session = _login(app)
    csrf = _csrf(_get(app, "/", cookie=session).body)
    response = _post(app, f"/requests/{request.request_id}/deny", {"reason": "", "csrf": csrf}, cookie=session)
    assert response.status == 400 and b"needs a reason" in response.body
    assert store.get(request.request_id).status is ReviewState.PENDING


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
        assert app.bound_host == f"127.0.0.1:{port}"
        assert len(app.token) >= 40 and len(app.capability) >= 40
        assert app.url == f"http://127.0.0.1:{port}/{app.capability}/"
        second, other = make_review_server(store, key, host="127.0.0.1", port=0)
        second.server_close()
        assert other.capability != app.capability  # new at every start
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


# ---- issue 19 item 1: another loopback origin can neither obtain nor use the session


def test_every_path_outside_the_capability_is_a_404_that_echoes_nothing(app, store):
    request = _submit(store)
    session = _login(app)
    near_misses = ["/", "/login", f"/requests/{request.request_id}", f"/{CAP[:-1]}/", f"/{CAP}x/", f"/x{CAP}/",
                   f"/{CAP.lower()}/", f"//{CAP}/", f"/a/{CAP}/"]
    for path in near_misses:
        response = _get(app, "", cookie=session, path=path)
        assert response.status == 404, path
        assert CAP.encode() not in response.body and not dict(response.headers).get("Set-Cookie")
    # Logging in or approving outside the capability does nothing either.
    login = _post(app, "", {"token": "secret-token"}, path="/login")
    assert login.status == 404 and "Set-Cookie" not in dict(login.headers)
    csrf = _csrf(_get(app, "/", cookie=session).body)
    approve = _post(app, "", {"scope": "once", "csrf": csrf}, cookie=session,
                    path=f"/requests/{request.request_id}/approve")
    assert approve.status == 404
    assert store.get(request.request_id).status is ReviewState.PENDING


def test_the_session_cookie_is_scoped_to_the_capability_path(app):
    response = _post(app, "/login", {"token": "secret-token"})
    cookie = dict(response.headers)["Set-Cookie"]
    attributes = [part.strip() for part in cookie.split(";")[1:]]
    assert sorted(attributes) == sorted(["HttpOnly", "SameSite=Strict", f"Path={P}"])
    assert dict(response.headers)["Location"] == P
    session = re.match(rf"{COOKIE_NAME}=([^;]+)", cookie).group(1)
    logout = _post(app, "/logout", {"csrf": _csrf(_get(app, "/", cookie=session).body)}, cookie=session)
    assert dict(logout.headers)["Set-Cookie"] == f"{COOKIE_NAME}=; Max-Age=0; Path={P}"


def test_the_stolen_session_attack_is_refused_at_its_last_step_too(app, store):
    """Even with a valid session and CSRF token, a POST without Origin (a server-side client) is refused."""
    request = _submit(store)
    session = _login(app)
    csrf = _csrf(_get(app, "/", cookie=session).body)
    form = {"scope": "for", "duration": "30d", "csrf": csrf}
    assert _post(app, f"/requests/{request.request_id}/approve", form, cookie=session, origin=None).status == 403
    bearer = {"authorization": "Bearer secret-token"}
    assert _post(app, f"/requests/{request.request_id}/approve", form, origin=None, **bearer).status == 403
    assert store.get(request.request_id).status is ReviewState.PENDING


@pytest.mark.parametrize("origin", ["http://127.0.0.1:6666", "http://localhost:9999", "https://127.0.0.1:9999",
                                    "http://127.0.0.1:9999.evil.example", "null", ""])
def test_a_post_from_any_other_origin_is_refused(app, store, origin):
    request = _submit(store)
    session = _login(app)
    csrf = _csrf(_get(app, "/", cookie=session).body)
    response = _post(app, f"/requests/{request.request_id}/approve", {"scope": "once", "csrf": csrf}, cookie=session,
                     origin=origin)
    assert response.status == 403
    assert store.get(request.request_id).status is ReviewState.PENDING


@pytest.mark.parametrize(("method", "site", "status"), [
    ("GET", "none", 200), ("GET", "same-origin", 200), ("GET", "same-site", 403), ("GET", "cross-site", 403),
    ("POST", "same-origin", 303), ("POST", "same-site", 403), ("POST", "cross-site", 403), ("POST", "none", 403),
])
def test_sec_fetch_site_other_than_same_origin_is_refused(app, store, method, site, status):
    request = _submit(store)
    session = _login(app)
    csrf = _csrf(_get(app, "/", cookie=session).body)
    if method == "GET":
        response = _get(app, "/", cookie=session, sec_fetch_site=site)
    else:
        response = _post(app, f"/requests/{request.request_id}/deny", {"reason": "no", "csrf": csrf}, cookie=session,
                         sec_fetch_site=site)
    assert response.status == status


def test_every_request_rule_refuses_its_own_case_and_has_a_reason(app):
    """Each row of REQUEST_RULES, violated alone in an otherwise good request, is the rule that answers."""
    from contain.gate.web import REQUEST_RULES, RequestFacts, first_refusal

    good_get = RequestFacts("GET", P, {"host": HOST}, HOST, CAP)
    good_post = RequestFacts("POST", P + "login", {"host": HOST, "origin": ORIGIN, "sec-fetch-site": "same-origin"},
                             HOST, CAP)
    assert first_refusal(good_get) is None and first_refusal(good_post) is None
    violations = {
        "host-is-bound-literal": RequestFacts("GET", P, {"host": "rebound.example:9999"}, HOST, CAP),
        "path-under-capability": RequestFacts("GET", "/", {"host": HOST}, HOST, CAP),
        "get-fetch-site": RequestFacts("GET", P, {"host": HOST, "sec-fetch-site": "same-site"}, HOST, CAP),
        "post-fetch-site": RequestFacts("POST", P, {**good_post.headers, "sec-fetch-site": "same-site"}, HOST, CAP),
        "post-origin-present": RequestFacts("POST", P, {"host": HOST}, HOST, CAP),
        "post-origin-is-this-server": RequestFacts("POST", P, {"host": HOST, "origin": "http://127.0.0.1:1"},
                                                   HOST, CAP),
    }
    assert set(violations) == {rule.rule_id for rule in REQUEST_RULES}
    for rule in REQUEST_RULES:
        assert rule.why and rule.message and rule.status >= 400
        assert first_refusal(violations[rule.rule_id]) is rule, rule.rule_id


def test_cookies_another_port_sets_cannot_hide_or_replace_the_session(app):
    session = _login(app)
    for header in (f"{COOKIE_NAME}=planted; {COOKIE_NAME}={session}", f"{COOKIE_NAME}={session}; {COOKIE_NAME}=planted",
                   f'junk="unterminated; {COOKIE_NAME}={session}', f"{COOKIE_NAME}={session}; ;;=; x"):
        assert app.handle("GET", P, {"host": HOST, "cookie": header}, b"").status == 200, header
    assert _get(app, "/", cookie="planted").status == 303


def test_an_app_without_a_long_capability_or_a_token_is_refused(store):
    from contain.errors import GateError

    key = GrantKey.from_bytes(b"w" * 32)
    for kwargs in ({"capability": ""}, {"capability": "short"}, {"token": ""}, {"bound_host": ""}):
        with pytest.raises(GateError):
            ReviewApp(**{"store": store, "key": key, "token": "t", "bound_host": HOST, "capability": CAP, **kwargs})


def test_the_capability_and_the_token_are_not_in_the_repr(app):
    assert CAP not in repr(app) and "secret-token" not in repr(app)
    assert app.redact(f"GET {P}requests/x secret-token") == "GET /<capability>/requests/x <token>"


# ---- issue 19 item 2: what the reviewer reads prints as itself


def test_names_principals_and_reasons_on_the_page_are_shown_visibly(app, store):
    hostile = "fs__write\u202eelif_\x1b[2J"
    call = ToolCall("al\u200bice", "srv\ufe0f", hostile, "sha256:tool", {"path": "/out/a"})
    request = store.submit(call, Decision(ToolVerdict.REVIEW, "tools[0]", f"tools[0] (review {hostile}) needs review"))
    session = _login(app)
    for body in (_get(app, "/", cookie=session).body.decode(), _get(app, f"/requests/{request.request_id}",
                                                                   cookie=session).body.decode()):
        for raw in ("\u202e", "\x1b", "\u200b", "\ufe0f"):
            assert raw not in body
        assert "fs__write\\u202eelif_\\x1b[2J" in body and "al\\u200bice" in body and "srv\\ufe0f" in body
