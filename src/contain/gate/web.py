"""The review page (``contain review serve``): approve or deny pending tool calls in a browser.

Why a capability path. Browsers send a host's cookies to *every port* of that host, and
``SameSite`` compares sites, not ports: 127.0.0.1:8765 and 127.0.0.1:6666 are the same site. So a
page another local user serves on another loopback port can redirect to itself, receive a
``Path=/`` session cookie, read the CSRF token with it and approve from its own server (issue 19,
item 1; ``tests/integration/test_review_web.py`` runs that attack in Chromium). The one part of a
URL such a page cannot know is a secret path, and a cookie's ``Path=`` attribute is honoured across
ports. So every route lives under ``/<capability>/`` (256 random bits, new at every start, printed
once in the URL the reviewer opens), the session cookie is scoped to that path, and everything
else is a 404. We chose not to rely on ``__Host-`` cookies (they need TLS), on port-bound cookies
(not shipped by default in browsers) or on a per-port cookie name (the other page still receives it).

What is enforced (the ``REQUEST_RULES`` table, checked in order before anything else, then login):

* It listens on IPv4 loopback only and answers only ``Host: <the bound literal>:<port>`` (no
  ``localhost``, no other name), so a page elsewhere cannot reach it by DNS rebinding.
* Every path outside ``/<capability>/`` is a 404 that echoes nothing. The session cookie is
  ``HttpOnly; SameSite=Strict; Path=/<capability>/``, so no other port's page ever receives it.
* A request with ``Sec-Fetch-Site`` other than ``same-origin`` (or ``none``, a typed URL, for GET)
  is refused. A POST must carry ``Origin`` equal to this server (``http://127.0.0.1:PORT``): a POST
  without one, with ``null`` or with another origin is refused, whatever else it carries.
* Nothing is shown or decided without the token printed at start: a login form (compared with
  ``hmac.compare_digest``) gives a random session id in the cookie above; a script may instead send
  ``Authorization: Bearer <token>`` (and, for a POST, the ``Origin`` header, like a browser).
* Every POST that changes something carries a CSRF token bound to the session (an HMAC of the
  session id under a per-process secret). Bodies are capped at 64 KiB.
* Every value from the request (arguments, tool names, principals, reasons) goes through
  ``contain.visible_text.for_terminal`` and is then HTML-escaped: control, invisible and bidi
  characters are shown as ``\\xNN``/``\\uXXXX`` escapes (with a warning for arguments), so what
  the reviewer reads is what the digest covers. ``Content-Security-Policy`` forbids scripts, frames
  and off-site form targets; ``Referrer-Policy: same-origin`` keeps the path out of other sites.
* The capability and the token appear in no log line (request lines are logged with the
  capability replaced by ``<capability>``) and in no repr; the CLI prints them once at start.
* The page says in plain words what each scope will allow (who, which tool, which exact
  arguments, how often, until when) before the reviewer chooses it.

What is not: the reviewer's identity (whoever holds the URL and the token is trusted; the name
recorded is the one given to ``serve``), TLS (loopback only), rate limiting (capability and token
are 256 bits each), other local users reading the reviewer's terminal or browser profile (a user
who can read those owns the session anyway), and a browser extension with access to the page.

Why one file past 600 lines: it is one mechanism, the review page's HTTP surface; the request
rules, the capability path and the rendering of untrusted text are read together by a reviewer
asking whether another local page can act as the reviewer.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import ipaddress
import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from contain._log import LazyLogger
from contain.errors import GateError
from contain.gate.grants import (
    DEFAULT_GRANT_TTL_S,
    GrantKey,
    GrantScope,
    describe_scope,
    parse_duration,
)
from contain.gate.store import ReviewRequest, ReviewState, ReviewStore
from contain.visible_text import count_escaped, for_terminal

__all__ = [
    "REQUEST_RULES",
    "RequestFacts",
    "RequestRule",
    "Response",
    "ReviewApp",
    "first_refusal",
    "make_review_server",
    "render_arguments",
]

log = LazyLogger(__name__)

COOKIE_NAME = "contain_review"
MAX_BODY_BYTES = 64 * 1024
CAPABILITY_BYTES = 32  # 256 bits, as the token: not guessable over loopback at any request rate
LOGGED_CAPABILITY = "<capability>"  # what log lines show in place of the capability
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#111}
.req{border:1px solid #999;border-radius:6px;padding:1em;margin:1em 0}
pre{background:#f4f4f4;padding:.6em;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.warn{color:#a00;font-weight:bold} .msg{background:#eef;padding:.5em} code{font-size:90%}
fieldset{margin:.5em 0} label{display:block;margin:.2em 0}
"""


@dataclass(frozen=True)
class Response:
    """An HTTP response as data: status, headers, body."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()


def _page(title: str, body: str, *, status: int = 200, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    text = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )
    return Response(status, text.encode("utf-8"), (("Content-Type", "text/html; charset=utf-8"), *headers))


def _redirect(location: str, *, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(HTTPStatus.SEE_OTHER, b"", (("Location", location), *headers))


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _v(value: object) -> str:
    """Untrusted text for the page: control, invisible and bidi characters spelled out, then escaped."""
    return _e(for_terminal(value))


def render_arguments(arguments: Mapping[str, Any]) -> tuple[str, int]:
    """Pretty JSON of the arguments with invisible characters spelled out; returns (text, count).

    The text is ``contain.visible_text.for_terminal`` of the JSON (line breaks of the layout kept),
    so the page and ``contain review show`` show the same thing; the count is how many characters
    were spelled out, for the warning.
    """
    text = json.dumps(arguments, indent=2, sort_keys=True, ensure_ascii=False)
    return for_terminal(text, keep_newlines=True), count_escaped(text, keep_newlines=True)


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


@dataclass(frozen=True)
class RequestFacts:
    """What the protecting rules look at in one request (header names lower case)."""

    method: str
    path: str
    headers: Mapping[str, str]
    bound_host: str  # "127.0.0.1:PORT", the literal the server is bound to
    capability: str


def _is_outside_capability(facts: RequestFacts) -> bool:
    first, _, _ = facts.path.removeprefix("/").partition("/")
    # Constant-time on the secret; a path with no "/<capability>" segment compares to "" and fails.
    return not (facts.path.startswith("/") and hmac.compare_digest(first.encode(), facts.capability.encode()))


def _is_foreign_fetch(facts: RequestFacts, *, allowed: frozenset[str]) -> bool:
    site = facts.headers.get("sec-fetch-site")
    return site is not None and site.strip().lower() not in allowed


def _origin(facts: RequestFacts) -> str:
    return f"http://{facts.bound_host}"


@dataclass(frozen=True)
class RequestRule:
    """One protecting rule: which requests it refuses, with which status, and why.

    ``is_refused`` is a pure predicate of the request's facts. The rules run in table order before
    any routing, login or session lookup; the first that refuses answers, with ``message`` only
    (nothing from the request is echoed).
    """

    rule_id: str
    methods: frozenset[str]
    is_refused: Callable[[RequestFacts], bool]
    status: HTTPStatus
    message: str
    why: str


_ANY = frozenset({"GET", "POST"})
_POST = frozenset({"POST"})

REQUEST_RULES: tuple[RequestRule, ...] = (
    RequestRule(
        "host-is-bound-literal",
        _ANY,
        lambda f: f.headers.get("host", "") != f.bound_host,
        HTTPStatus.MISDIRECTED_REQUEST,
        "Wrong Host header.",
        "DNS rebinding: a page on attacker.example that resolves to 127.0.0.1 sends Host: attacker.example; "
        "only the literal the server bound (no name, not even localhost) is this server",
    ),
    RequestRule(
        "path-under-capability",
        _ANY,
        _is_outside_capability,
        HTTPStatus.NOT_FOUND,
        "Not found.",
        "a browser sends 127.0.0.1's cookies to every port and SameSite ignores ports; a page on another "
        "loopback port cannot know the random path, so the session cookie (Path=/<capability>/) never reaches it",
    ),
    RequestRule(
        "get-fetch-site",
        frozenset({"GET"}),
        lambda f: _is_foreign_fetch(f, allowed=frozenset({"same-origin", "none"})),
        HTTPStatus.FORBIDDEN,
        "Cross-origin request refused.",
        "a navigation started by another origin (another port of 127.0.0.1 is same-site, not same-origin) "
        "never shows the page; 'none' is a URL the reviewer typed or pasted",
    ),
    RequestRule(
        "post-fetch-site",
        _POST,
        lambda f: _is_foreign_fetch(f, allowed=frozenset({"same-origin"})),
        HTTPStatus.FORBIDDEN,
        "Cross-origin request refused.",
        "a state change comes only from this page's own forms",
    ),
    RequestRule(
        "post-origin-present",
        _POST,
        lambda f: "origin" not in f.headers,
        HTTPStatus.FORBIDDEN,
        "A POST without an Origin header is refused.",
        "browsers send Origin on every POST; one without it is a client that is not this page's form "
        "(or a stripped header), and the CSRF defence does not rest on an optional header",
    ),
    RequestRule(
        "post-origin-is-this-server",
        _POST,
        lambda f: f.headers.get("origin", "").strip() != _origin(f),
        HTTPStatus.FORBIDDEN,
        "Cross-origin request refused.",
        "a form on another origin (including another loopback port, or 'null' from a sandboxed frame) "
        "must not approve anything",
    ),
)


def first_refusal(facts: RequestFacts) -> RequestRule | None:
    """The first row of ``REQUEST_RULES`` that refuses this request, or None when all pass."""
    for rule in REQUEST_RULES:
        if facts.method in rule.methods and rule.is_refused(facts):
            return rule
    return None


def _cookie_values(header: str, name: str) -> list[str]:
    # Parsed by hand: another port's page can set cookies for 127.0.0.1 (same name with Path=/, or a
    # malformed one) and must not be able to hide ours; SimpleCookie keeps only the last value of a
    # name and drops the whole header on some malformed pairs.
    values = []
    for pair in header.split(";"):
        key, sep, value = pair.strip().partition("=")
        if sep and key == name:
            values.append(value.strip())
    return values


@dataclass
class ReviewApp:
    """The review page's logic, independent of sockets: ``handle`` maps a request to a Response.

    Args:
        store: the review queue.
        key: the grant key used when approving.
        token: the access token (printed at start by the CLI).
        bound_host: the only ``Host`` accepted, ``127.0.0.1:PORT`` (the literal the server bound).
        reviewer: the name recorded as reviewer for decisions made here.
        capability: the secret first path segment; a fresh random one by default.
    """

    store: ReviewStore
    key: GrantKey
    token: str = field(repr=False)
    bound_host: str
    reviewer: str = "web"
    capability: str = field(default_factory=lambda: secrets.token_urlsafe(CAPABILITY_BYTES), repr=False)
    _sessions: set[str] = field(default_factory=set, repr=False)
    _flash: dict[str, str] = field(default_factory=dict, repr=False)
    _csrf_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        # Fail closed: an empty capability would make every path "under" it, an empty token any login.
        if len(self.capability) < 32 or not self.token or not self.bound_host:
            raise GateError(
                "the review page needs a capability of at least 32 characters, a token and the bound host",
                "build it with make_review_server, which generates both and binds first",
            )

    @property
    def prefix(self) -> str:
        """``/<capability>/``: every route lives under it and the session cookie is scoped to it."""
        return f"/{self.capability}/"

    @property
    def url(self) -> str:
        """The one URL to give the reviewer (it holds the capability: print it once, log it never)."""
        return f"http://{self.bound_host}{self.prefix}"

    def redact(self, text: str) -> str:
        """``text`` with the capability and the token replaced, for log lines."""
        return text.replace(self.capability, LOGGED_CAPABILITY).replace(self.token, "<token>")

    def csrf_for(self, session: str) -> str:
        """The CSRF token bound to ``session``."""
        return hmac.new(self._csrf_secret, b"csrf\x00" + session.encode(), hashlib.sha256).hexdigest()

    def _session(self, headers: Mapping[str, str]) -> str | None:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            presented = auth[7:].strip().encode()
            return "bearer" if hmac.compare_digest(presented, self.token.encode()) else None
        presented_sessions = _cookie_values(headers.get("cookie", ""), COOKIE_NAME)
        with self._lock:
            return next((value for value in presented_sessions if value in self._sessions), None)

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Response:
        """Answer one request. Header names in ``headers`` are lower case."""
        url = urlsplit(target)
        refusal = first_refusal(RequestFacts(method, url.path, headers, self.bound_host, self.capability))
        if refusal is not None:
            return _page("Refused", f"<p>{_e(refusal.message)}</p>", status=refusal.status)
        path = "/" + url.path.removeprefix("/").partition("/")[2]  # the route below the capability
        p = self.prefix
        if path == "/login":
            return self._login(method, body)
        session = self._session(headers)
        if session is None:
            if method == "GET":
                return _redirect(f"{p}login")
            return _page("Login needed", "<p>Log in first.</p>", status=HTTPStatus.UNAUTHORIZED)
        if method == "GET" and path == "/":
            with self._lock:
                message = self._flash.pop(session, "")  # kept server-side: the URL reflects nothing
            return self._index(session, message)
        if method == "GET" and path.startswith("/requests/"):
            return self._detail(session, path.removeprefix("/requests/"))
        if method == "POST":
            form = _form(body)
            if not hmac.compare_digest(form.get("csrf", ""), self.csrf_for(session)):
                return _page("Refused", "<p>Missing or wrong CSRF token.</p>", status=HTTPStatus.FORBIDDEN)
            if path == "/logout":
                with self._lock:
                    self._sessions.discard(session)
                return _redirect(f"{p}login", headers=(("Set-Cookie", f"{COOKIE_NAME}=; Max-Age=0; Path={p}"),))
            parts = path.strip("/").split("/")
            if len(parts) == 3 and parts[0] == "requests" and parts[2] in ("approve", "deny"):
                return self._decide(session, parts[1], parts[2], form)
        return _page("Not found", "<p>Not found.</p>", status=HTTPStatus.NOT_FOUND)

    def _login(self, method: str, body: bytes) -> Response:
        form_html = (
            f"<h1>contain review</h1><form method='post' action='{_e(self.prefix)}login'>"
            "<label>Access token (printed by <code>contain review serve</code>) "
            "<input type='password' name='token' autocomplete='off' autofocus></label>"
            "<button type='submit'>Log in</button></form>"
        )
        if method == "GET":
            return _page("Log in", form_html)
        presented = _form(body).get("token", "")
        if not hmac.compare_digest(presented.encode(), self.token.encode()):
            return _page("Log in", "<p class='warn'>Wrong token.</p>" + form_html, status=HTTPStatus.UNAUTHORIZED)
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions.add(session)
        # Path= the capability: a browser never sends it to another port's page (see the module docstring).
        cookie = f"{COOKIE_NAME}={session}; HttpOnly; SameSite=Strict; Path={self.prefix}"
        return _redirect(self.prefix, headers=(("Set-Cookie", cookie),))

    def _index(self, session: str, message: str) -> Response:
        self.store.expire_stale()
        pending = self.store.list(ReviewState.PENDING)
        decided = [r for r in self.store.list(limit=50) if r.status is not ReviewState.PENDING][:20]
        csrf = self.csrf_for(session)
        parts = [f"<h1>contain review</h1><p>{len(pending)} pending request(s).</p>"]
        if message:
            parts.append(f"<p class='msg' id='message'>{_v(message)}</p>")
        parts.extend(self._card(r, csrf) for r in reversed(pending))
        if decided:
            parts.append("<h2>Recently decided</h2><ul id='decided'>")
            for r in decided:
                parts.append(
                    f"<li><a href='{_e(self.prefix)}requests/{_e(r.request_id)}'>{_v(r.request_id)}</a> "
                    f"{_v(r.tool)}: <b class='status'>{_e(r.status.value)}</b>"
                    + (f" by {_v(r.reviewer)}: {_v(r.review_reason or '')}" if r.reviewer else "")
                    + "</li>"
                )
            parts.append("</ul>")
        parts.append(
            f"<form method='post' action='{_e(self.prefix)}logout'>"
            f"<input type='hidden' name='csrf' value='{_e(csrf)}'>"
            "<button type='submit'>Log out</button></form>"
        )
        return _page("contain review", "".join(parts))

    def _detail(self, session: str, request_id: str) -> Response:
        try:
            request = self.store.get(request_id)
        except GateError as exc:
            return _page("Not found", f"<p>{_v(exc.cause)}</p>", status=HTTPStatus.NOT_FOUND)
        card = self._card(request, self.csrf_for(session))
        return _page(
            f"Request {for_terminal(request_id)}", f"<p><a href='{_e(self.prefix)}'>All requests</a></p>" + card
        )

    def _card(self, r: ReviewRequest, csrf: str) -> str:
        args_text, invisible = render_arguments(r.arguments)
        now = self.store.now()
        who = f"principal <b>{_v(r.principal)}</b>"
        what = f"call <b>{_v(r.tool)}</b>" + (f" on server <b>{_v(r.server)}</b>" if r.server else "")
        base = f"{who} to {what} with exactly the arguments above"
        ttl = _utc(now + DEFAULT_GRANT_TTL_S)
        rid = _e(r.request_id)
        action = f"{_e(self.prefix)}requests/{rid}"
        out = [
            f"<div class='req' id='req-{rid}'><h3>{_v(r.request_id)}: {_v(r.tool)} "
            f"<small>({_e(r.status.value)})</small></h3>",
            f"<p>Asked by {who}{' via server ' + _v(r.server) if r.server else ''} at {_e(_utc(r.created_at))}; "
            f"expires unanswered at {_e(_utc(r.expires_at))}.</p>",
            f"<p>Why it needs review: {_v(r.rule_id)}: {_v(r.decision_reason)}</p>",
            "<p>Arguments (exact):</p>",
        ]
        if invisible:
            out.append(
                f"<p class='warn'>These arguments contain {invisible} invisible character(s), "
                "shown as \\u escapes.</p>"
            )
        out.append(f"<pre class='args'>{_e(args_text)}</pre>")
        out.append(
            f"<p>Argument digest <code>{_e(r.argument_digest)}</code><br>Tool definition digest "
            f"<code>{_v(r.tool_digest)}</code></p>"
        )
        if r.status is not ReviewState.PENDING:
            if r.scope is not None:
                out.append(f"<p>Approved by {_v(r.reviewer)}: allows {base}, {_e(describe_scope(r.scope))}.</p>")
            elif r.review_reason:
                out.append(f"<p>Denied by {_v(r.reviewer)}: {_v(r.review_reason)}</p>")
            out.append("</div>")
            return "".join(out)
        hidden = f"<input type='hidden' name='csrf' value='{_e(csrf)}'>"
        out.append(
            f"<form method='post' action='{action}/approve' class='approve'>{hidden}"
            "<fieldset><legend>Approve: what the grant will allow</legend>"
            f"<label><input type='radio' name='scope' value='once' checked> Once: allows {base} "
            f"one time, within an hour (until {_e(ttl)}).</label>"
            f"<label><input type='radio' name='scope' value='uses'> Up to "
            "<input type='number' name='uses' value='3' min='1' max='1000' size='4'> times: allows "
            f"{base} that many times, within an hour (until {_e(ttl)}).</label>"
            "<label><input type='radio' name='scope' value='for'> For "
            "<input type='text' name='duration' value='10m' size='5'> (e.g. 90s, 10m, 2h, 1d): allows "
            f"{base} any number of times until that much time has passed.</label>"
            "<p>The grant is void for any other arguments, another principal, or a changed tool "
            "definition.</p>"
            "<label>Reason (optional) <input type='text' name='reason' size='40'></label>"
            "<button type='submit'>Approve</button></fieldset></form>"
            f"<form method='post' action='{action}/deny' class='deny'>{hidden}"
            "<fieldset><legend>Deny</legend><label>Reason (required; the agent is told) "
            "<input type='text' name='reason' size='40' required></label>"
            "<button type='submit'>Deny</button></fieldset></form></div>"
        )
        return "".join(out)

    def _decide(self, session: str, request_id: str, action: str, form: Mapping[str, str]) -> Response:
        try:
            if action == "deny":
                self.store.deny(request_id, reviewer=self.reviewer, reason=form.get("reason", ""))
                message = f"{request_id} denied"
            else:
                scope = scope_from_form(form, now=self.store.now())
                self.store.approve(
                    request_id, key=self.key, scope=scope, reviewer=self.reviewer, reason=form.get("reason", "")
                )
                message = f"{request_id} approved: {describe_scope(scope)}"
        except (GateError, ValueError) as exc:
            text = exc.cause if isinstance(exc, GateError) else str(exc)
            back = f"<p><a href='{_e(self.prefix)}'>Back</a></p>"
            return _page("Not done", f"<p class='warn'>{_v(text)}</p>{back}", status=400)
        with self._lock:
            self._flash[session] = message
        return _redirect(self.prefix)


def scope_from_form(form: Mapping[str, str], *, now: float) -> GrantScope:
    """Turn the approve form's fields into a scope.

    Raises:
        ValueError: for an unknown scope, a bad number of uses or a bad duration.
    """
    kind = form.get("scope", "")
    if kind == "once":
        return GrantScope.once(now=now)
    if kind == "uses":
        text = form.get("uses", "")
        if not text.isdigit() or not 1 <= int(text) <= 1000:
            raise ValueError(f"uses {text!r} must be a whole number from 1 to 1000")
        return GrantScope.n_uses(int(text), now=now)
    if kind == "for":
        return GrantScope.until(now + parse_duration(form.get("duration", "")))
    raise ValueError(f"scope {kind!r} is not once, uses or for")


def _form(body: bytes) -> dict[str, str]:
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        return {}
    return {k: v[0] for k, v in parsed.items() if v}


def _handler_class(app: ReviewApp) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "contain-review"
        sys_version = ""

        def _respond(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES or length < 0:
                response = _page("Too large", "<p>Request body too large.</p>", status=413)
            else:
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    response = app.handle(method, self.path, headers, body)
                except Exception:  # never approve on an error; show a 500 and log it
                    log.exception("review page error")
                    response = _page("Error", "<p>Internal error; nothing was changed.</p>", status=500)
            self.send_response(response.status)
            for name, value in response.headers:
                self.send_header(name, value)
            self.send_header("Content-Security-Policy", _CSP)
            self.send_header("X-Frame-Options", "DENY")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "same-origin")  # no-referrer would make Origin "null"
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            self.wfile.write(response.body)

        def do_GET(self) -> None:
            self._respond("GET")

        def do_POST(self) -> None:
            self._respond("POST")

        def log_message(self, format: str, *args: Any) -> None:
            # The request line holds the capability (redacted: it appears only in the CLI's one
            # announcement) and anything a client sent (rendered: logs go to a terminal).
            log.info("%s %s", self.address_string(), for_terminal(app.redact(format % args)))

    return Handler


def make_review_server(
    store: ReviewStore,
    key: GrantKey,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    reviewer: str = "web",
    on_app: Callable[[ReviewApp], None] | None = None,
) -> tuple[ThreadingHTTPServer, ReviewApp]:
    """Bind the review page on a loopback address; the caller runs ``serve_forever``.

    Args:
        store, key: the queue and the grant key.
        host: an IPv4 loopback address such as 127.0.0.1 (anything else is refused).
        port: the TCP port; 0 picks a free one.
        token: the access token; a fresh random one when None.
        reviewer: the name recorded for decisions made on the page.

    Returns:
        The bound server and the app: ``app.url`` (holding the capability) is what the reviewer
        opens and ``app.token`` what they enter; print both once, log neither.

    Raises:
        GateError: when ``host`` is not a loopback address.
    """
    try:
        address = ipaddress.ip_address(host)
        loopback = address.version == 4 and address.is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise GateError(
            f"the review page listens on IPv4 loopback only, not {host!r}",
            "use 127.0.0.1 (reach it remotely through an SSH tunnel)",
        )
    server = ThreadingHTTPServer((str(address), port), BaseHTTPRequestHandler)  # handler set below
    server.daemon_threads = True
    app = ReviewApp(
        store=store,
        key=key,
        token=token or secrets.token_urlsafe(32),
        bound_host=f"{address}:{int(server.server_address[1])}",  # the port is known only once bound
        reviewer=reviewer,
    )
    server.RequestHandlerClass = _handler_class(app)
    if on_app is not None:
        on_app(app)
    return server, app
