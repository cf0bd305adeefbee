"""The review page (``contain review serve``): approve or deny pending tool calls in a browser.

What is enforced:

* It listens on loopback only (127.0.0.1 by default; other addresses are refused) and answers only
  requests whose ``Host`` header names that loopback address or ``localhost`` with its port, so a
  web page elsewhere cannot reach it by DNS rebinding.
* Nothing is shown or decided without the token printed at start. A browser enters it once in a
  login form (compared with ``hmac.compare_digest``) and gets a random session id in an
  ``HttpOnly; SameSite=Strict`` cookie; a script may instead send ``Authorization: Bearer <token>``.
* Every POST that changes something carries a CSRF token bound to the session (an HMAC of the
  session id under a per-process secret), and a POST whose ``Origin`` is present and not this
  server is refused. Bodies are capped at 64 KiB.
* Every value from the request (arguments, tool names, reasons) is HTML-escaped; invisible and
  bidirectional-control characters in arguments are shown as ``\\uXXXX`` escapes with a warning,
  so what the reviewer reads is what the digest covers. ``Content-Security-Policy`` forbids
  scripts, frames and off-site form targets.
* The page says in plain words what each scope will allow (who, which tool, which exact
  arguments, how often, until when) before the reviewer chooses it.

What is not: the reviewer's identity (the token holder is trusted; the name recorded is the one
given to ``serve``), TLS (loopback only), and rate limiting (the token is 256 bits).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import ipaddress
import json
import logging
import secrets
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from contain.errors import GateError
from contain.gate.grants import (
    DEFAULT_GRANT_TTL_S,
    GrantKey,
    GrantScope,
    describe_scope,
    parse_duration,
)
from contain.gate.store import RequestStatus, ReviewRequest, ReviewStore

__all__ = ["Response", "ReviewApp", "make_review_server"]

logger = logging.getLogger(__name__)

COOKIE_NAME = "contain_review"
MAX_BODY_BYTES = 64 * 1024
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


def _is_invisible(ch: str) -> bool:
    # Cf covers zero-width and bidi controls and tag characters; Cc control codes; Z* odd spaces.
    return unicodedata.category(ch) in ("Cf", "Cc", "Co", "Cs", "Zl", "Zp") or (
        unicodedata.category(ch) == "Zs" and ch != " "
    )


def render_arguments(arguments: Mapping[str, Any]) -> tuple[str, int]:
    """Pretty JSON of the arguments with invisible characters spelled out; returns (text, count)."""
    text = json.dumps(arguments, indent=2, sort_keys=True, ensure_ascii=False)
    count = 0
    out = []
    for ch in text:
        if ch != "\n" and _is_invisible(ch):
            count += 1
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out), count


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


@dataclass
class ReviewApp:
    """The review page's logic, independent of sockets: ``handle`` maps a request to a Response.

    Args:
        store: the review queue.
        key: the grant key used when approving.
        token: the access token (printed at start by the CLI).
        reviewer: the name recorded as reviewer for decisions made here.
        allowed_hosts: Host header values accepted (``127.0.0.1:port``, ``localhost:port``).
    """

    store: ReviewStore
    key: GrantKey
    token: str
    reviewer: str = "web"
    allowed_hosts: frozenset[str] = frozenset()
    _sessions: set[str] = field(default_factory=set)
    _flash: dict[str, str] = field(default_factory=dict)
    _csrf_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def csrf_for(self, session: str) -> str:
        """The CSRF token bound to ``session``."""
        return hmac.new(self._csrf_secret, b"csrf\x00" + session.encode(), hashlib.sha256).hexdigest()

    def _session(self, headers: Mapping[str, str]) -> str | None:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            presented = auth[7:].strip().encode()
            return "bearer" if hmac.compare_digest(presented, self.token.encode()) else None
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed cookie header is no session
            return None
        morsel = cookie.get(COOKIE_NAME)
        if morsel is None:
            return None
        with self._lock:
            return morsel.value if morsel.value in self._sessions else None

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Response:
        """Answer one request. Header names in ``headers`` are lower case."""
        if self.allowed_hosts and headers.get("host", "") not in self.allowed_hosts:
            return _page("Refused", "<p>Wrong Host header.</p>", status=HTTPStatus.MISDIRECTED_REQUEST)
        url = urlsplit(target)
        path = url.path
        if method == "POST":
            origin = headers.get("origin")
            if origin is not None and urlsplit(origin).netloc not in self.allowed_hosts:
                return _page("Refused", "<p>Cross-origin request refused.</p>", status=HTTPStatus.FORBIDDEN)
        if path == "/login":
            return self._login(method, body)
        session = self._session(headers)
        if session is None:
            if method == "GET":
                return _redirect("/login")
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
                return _redirect("/login", headers=(("Set-Cookie", f"{COOKIE_NAME}=; Max-Age=0; Path=/"),))
            parts = path.strip("/").split("/")
            if len(parts) == 3 and parts[0] == "requests" and parts[2] in ("approve", "deny"):
                return self._decide(session, parts[1], parts[2], form)
        return _page("Not found", "<p>Not found.</p>", status=HTTPStatus.NOT_FOUND)

    def _login(self, method: str, body: bytes) -> Response:
        form_html = (
            "<h1>contain review</h1><form method='post' action='/login'>"
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
        cookie = f"{COOKIE_NAME}={session}; HttpOnly; SameSite=Strict; Path=/"
        return _redirect("/", headers=(("Set-Cookie", cookie),))

    def _index(self, session: str, message: str) -> Response:
        self.store.expire_stale()
        pending = self.store.list(RequestStatus.PENDING)
        decided = [r for r in self.store.list(limit=50) if r.status is not RequestStatus.PENDING][:20]
        csrf = self.csrf_for(session)
        parts = [f"<h1>contain review</h1><p>{len(pending)} pending request(s).</p>"]
        if message:
            parts.append(f"<p class='msg' id='message'>{_e(message)}</p>")
        parts.extend(self._card(r, csrf) for r in reversed(pending))
        if decided:
            parts.append("<h2>Recently decided</h2><ul id='decided'>")
            for r in decided:
                parts.append(
                    f"<li><a href='/requests/{_e(r.request_id)}'>{_e(r.request_id)}</a> {_e(r.tool)}: "
                    f"<b class='status'>{_e(r.status.value)}</b>"
                    + (f" by {_e(r.reviewer)}: {_e(r.review_reason or '')}" if r.reviewer else "")
                    + "</li>"
                )
            parts.append("</ul>")
        parts.append(
            f"<form method='post' action='/logout'><input type='hidden' name='csrf' value='{_e(csrf)}'>"
            "<button type='submit'>Log out</button></form>"
        )
        return _page("contain review", "".join(parts))

    def _detail(self, session: str, request_id: str) -> Response:
        try:
            request = self.store.get(request_id)
        except GateError as exc:
            return _page("Not found", f"<p>{_e(exc.cause)}</p>", status=HTTPStatus.NOT_FOUND)
        card = self._card(request, self.csrf_for(session))
        return _page(f"Request {request_id}", "<p><a href='/'>All requests</a></p>" + card)

    def _card(self, r: ReviewRequest, csrf: str) -> str:
        args_text, invisible = render_arguments(r.arguments)
        now = self.store.now()
        who = f"principal <b>{_e(r.principal)}</b>"
        what = f"call <b>{_e(r.tool)}</b>" + (f" on server <b>{_e(r.server)}</b>" if r.server else "")
        base = f"{who} to {what} with exactly the arguments above"
        ttl = _utc(now + DEFAULT_GRANT_TTL_S)
        rid = _e(r.request_id)
        out = [
            f"<div class='req' id='req-{rid}'><h3>{rid}: {_e(r.tool)} <small>({_e(r.status.value)})</small></h3>",
            f"<p>Asked by {who}{' via server ' + _e(r.server) if r.server else ''} at {_e(_utc(r.created_at))}; "
            f"expires unanswered at {_e(_utc(r.expires_at))}.</p>",
            f"<p>Why it needs review: {_e(r.rule_id)}: {_e(r.decision_reason)}</p>",
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
            f"<code>{_e(r.tool_digest)}</code></p>"
        )
        if r.status is not RequestStatus.PENDING:
            if r.scope is not None:
                out.append(f"<p>Approved by {_e(r.reviewer)}: allows {base}, {_e(describe_scope(r.scope))}.</p>")
            elif r.review_reason:
                out.append(f"<p>Denied by {_e(r.reviewer)}: {_e(r.review_reason)}</p>")
            out.append("</div>")
            return "".join(out)
        hidden = f"<input type='hidden' name='csrf' value='{_e(csrf)}'>"
        out.append(
            f"<form method='post' action='/requests/{rid}/approve' class='approve'>{hidden}"
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
            f"<form method='post' action='/requests/{rid}/deny' class='deny'>{hidden}"
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
            return _page("Not done", f"<p class='warn'>{_e(text)}</p><p><a href='/'>Back</a></p>", status=400)
        with self._lock:
            self._flash[session] = message
        return _redirect("/")


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
                    logger.exception("review page error")
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
            logger.info("%s " + format, self.address_string(), *args)

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
        The bound server and the app (whose ``token`` is what the user must enter).

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
    app = ReviewApp(store=store, key=key, token=token or secrets.token_urlsafe(32), reviewer=reviewer)
    server = ThreadingHTTPServer((host, port), _handler_class(app))
    server.daemon_threads = True
    bound_port = int(server.server_address[1])
    app.allowed_hosts = frozenset({f"{host}:{bound_port}", f"localhost:{bound_port}"})
    if on_app is not None:
        on_app(app)
    return server, app
