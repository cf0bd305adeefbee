"""The review page in real headless Chromium: log in with the token, approve one request with a
scope, deny another with a reason, and check the store. The server is `contain review serve`,
started as a subprocess exactly as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contain.boundary import ToolVerdict
from contain.decision import Decision
from contain.gate import GrantKey, ReviewState, ReviewStore, decode_grant, verify_grant
from contain.gate.model import ToolCall

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
REVIEW = Decision(ToolVerdict.REVIEW, "tools[1]", "tools[1] (review fs__write_file) requires a human review")


@pytest.fixture
def served(tmp_path):
    db, key = tmp_path / "review.db", tmp_path / "grant.key"
    store = ReviewStore(db)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from contain.cli import main; sys.exit(main())",
         "review", "serve", "--port", "0", "--db", str(db), "--key", str(key), "--reviewer", "web:tester"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CONTAIN_STATE_DIR": str(tmp_path / "state")},
    )
    try:
        url_line = proc.stdout.readline()
        token_line = proc.stdout.readline()
        url = re.fullmatch(r"review page: (http://127\.0\.0\.1:\d+/\S*)\n", url_line)
        token = re.fullmatch(r"token: (\S+)\n", token_line)
        assert url and token, (url_line, token_line, proc.stderr.read() if proc.poll() is not None else "")
        yield store, key, url.group(1), token.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _submit(store: ReviewStore, path: str):
    call = ToolCall("alice", "fs", "fs__write_file", "sha256:tooldigest", {"path": path, "content": "<b>hello</b>"})
    return store.submit(call, REVIEW)


def test_review_page_in_chromium_approves_one_and_denies_another(served):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (Debian package chromium)")
    from playwright.sync_api import sync_playwright

    store, key_path, url, token = served
    first = _submit(store, "/work/out/report.txt")
    second = _submit(store, "/etc/cron.d/evil")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(url)
            assert page.url.endswith("/login")
            # A wrong token shows nothing.
            page.fill("input[name=token]", "not-the-token")
            page.click("button[type=submit]")
            assert "Wrong token" in page.content()
            assert first.request_id not in page.content()

            page.fill("input[name=token]", token)
            page.click("button[type=submit]")
            page.wait_for_selector(f"#req-{first.request_id}")
            card = page.locator(f"#req-{first.request_id}")
            text = card.inner_text()
            assert '"path": "/work/out/report.txt"' in text
            assert '"content": "<b>hello</b>"' in text  # escaped, shown literally, not rendered
            assert first.argument_digest in text and "sha256:tooldigest" in text
            assert "allows principal alice to call fs__write_file" in text

            # Approve the first for up to 2 uses.
            card.locator("input[name=scope][value=uses]").check()
            card.locator("input[name=uses]").fill("2")
            card.locator("form.approve input[name=reason]").fill("report output is fine")
            card.locator("form.approve button[type=submit]").click()
            page.wait_for_selector("#message")
            assert f"{first.request_id} approved: up to 2 times" in page.locator("#message").inner_text()

            # Deny the second with a reason.
            other = page.locator(f"#req-{second.request_id}")
            other.locator("form.deny input[name=reason]").fill("writes to cron")
            other.locator("form.deny button[type=submit]").click()
            page.wait_for_selector("#message")
            assert f"{second.request_id} denied" in page.locator("#message").inner_text()
            assert "0 pending request(s)" in page.content()
        finally:
            browser.close()

    approved = store.get(first.request_id)
    assert approved.status is ReviewState.APPROVED
    assert (approved.reviewer, approved.review_reason) == ("web:tester", "report output is fine")
    grant = decode_grant(approved.grant_token)
    assert (grant.scope.kind, grant.scope.uses) == ("uses", 2)
    denied = store.get(second.request_id)
    assert (denied.status, denied.review_reason, denied.grant_token) == (ReviewState.DENIED, "writes to cron", None)

    # The grant the page minted verifies for exactly the approved call, twice, with the served key.
    key = GrantKey.load_or_create(key_path)
    check = dict(principal="alice", tool="fs__write_file", tool_digest="sha256:tooldigest",
                 argument_digest=first.argument_digest, uses=store.uses)
    assert verify_grant(key, approved.grant_token, **check).ok
    assert verify_grant(key, approved.grant_token, **check).ok
    assert "already used 2/2" in verify_grant(key, approved.grant_token, **check).reason
    assert "argument digest differs" in verify_grant(
        key, approved.grant_token, **{**check, "argument_digest": second.argument_digest}).reason


class _Attacker:
    """Another local user's web server on another loopback port, running the whole session-theft attack.

    A browser sends 127.0.0.1's cookies to every port of 127.0.0.1, and ``SameSite`` does not look at
    ports. So: ``/start`` redirects to ``/collect`` on the same server (the navigation is then
    same-site, and Strict cookies go along); ``/collect`` takes whatever ``contain_review`` cookie
    arrived and, from the server side, fetches the review page's ``/`` (the only path it can know)
    for the CSRF token and the pending ids and POSTs a 30-day approval without an ``Origin``.
    """

    def __init__(self, review_url: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        self.review = urlsplit(review_url)
        self.cookies: list[str] = []
        self.attempts: list[tuple[str, int]] = []
        attacker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/start":
                    self.send_response(302)
                    self.send_header("Location", "/collect")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                cookie = self.headers.get("Cookie", "")
                attacker.cookies.append(cookie)
                if "contain_review=" in cookie:
                    attacker.attack(cookie)
                body = b"<html><body>nothing to see</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/start"

    def attack(self, cookie: str) -> None:
        import http.client

        def call(method: str, path: str, body: str = "") -> tuple[int, str]:
            conn = http.client.HTTPConnection(self.review.hostname, self.review.port, timeout=10)
            try:
                headers = {"Cookie": cookie}  # no Origin, no Sec-Fetch-Site: not a browser
                if body:
                    headers["Content-Type"] = "application/x-www-form-urlencoded"
                conn.request(method, path, body=body or None, headers=headers)
                response = conn.getresponse()
                text = response.read().decode("utf-8", "replace")
                self.attempts.append((f"{method} {path}", response.status))
                return response.status, text
            finally:
                conn.close()

        status, page = call("GET", "/")
        csrf = re.search(r"name='csrf' value='([0-9a-f]+)'", page)
        if status != 200 or csrf is None:
            return
        for request_id in re.findall(r"id='req-([^']+)'", page):
            call("POST", f"/requests/{request_id}/approve", f"scope=for&duration=30d&csrf={csrf.group(1)}")

    def __enter__(self) -> _Attacker:
        import threading

        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_page_on_another_loopback_port_cannot_steal_the_session_and_approve(served):
    """Issue 19 item 1: the redirect dance, the CSRF token from ``/`` and an Origin-less POST."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (Debian package chromium)")
    from playwright.sync_api import sync_playwright

    store, _key_path, url, token = served
    pending = _submit(store, "/home/alice/.bashrc")

    with _Attacker(url) as attacker, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            page = context.new_page()
            page.goto(url)
            page.fill("input[name=token]", token)
            page.click("button[type=submit]")
            page.wait_for_selector(f"#req-{pending.request_id}")
            # The reviewer, logged in, opens a link to the other user's page in another tab.
            lure = context.new_page()
            lure.goto(attacker.url)
            assert lure.url.endswith("/collect") and "nothing to see" in lure.content()
        finally:
            browser.close()

    assert attacker.cookies, "the attacker's page was not reached"
    after = store.get(pending.request_id)
    assert (after.status, after.grant_token) == (ReviewState.PENDING, None), attacker.attempts
    assert not [c for c in attacker.cookies if "contain_review=" in c], attacker.cookies


def test_the_capability_and_token_never_reach_a_log_line_and_request_lines_are_rendered(tmp_path, caplog):
    """A real server on loopback: every request line is logged with the capability redacted and
    control characters a client sent shown as escapes; the bearer token never appears."""
    import http.client
    import logging
    import socket
    import threading

    from contain.gate.web import make_review_server

    caplog.set_level(logging.INFO, logger="contain.gate.web")
    server, app = make_review_server(ReviewStore(tmp_path / "review.db"), GrantKey.from_bytes(b"k" * 32), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = app.bound_host.split(":")
    try:
        for path in (app.prefix, f"{app.prefix}login", f"{app.prefix}requests/r-1", "/", f"/{app.capability}"):
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.request("GET", path, headers={"Host": app.bound_host, "Authorization": f"Bearer {app.token}"})
            conn.getresponse().read()
            conn.close()
        with socket.create_connection((host, int(port)), timeout=10) as raw:  # a malformed request line
            raw.sendall(f"GET {app.prefix}\x1b]52;c;ZXZpbA==\x07 HTTP/9\r\n\r\n".encode())
            raw.recv(65536)
    finally:
        server.shutdown()
        server.server_close()
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert text.count("/<capability>/") >= 4, text
    assert app.capability not in text and app.token not in text
    assert "\x1b" not in text and "\x07" not in text and "\\x1b]52" in text
