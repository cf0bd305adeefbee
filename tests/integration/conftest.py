"""Fixtures shared by the integration tests (the markers and ``host_tmp`` are in tests/conftest.py)."""

from __future__ import annotations

import http.server
import os
import socketserver
import threading
from collections.abc import Iterator
from typing import Any

import pytest

HELLO_BODY = b"hello from host\n"


@pytest.fixture
def host_server() -> Iterator[tuple[int, list[str]]]:
    """A plain HTTP server on 127.0.0.1 (an ephemeral port) standing for a host the boundary may allow.

    Every GET gets 200 and ``HELLO_BODY``. Yields the port and the list of request paths it has
    served, in order, so a test can assert what reached it (and that a denied request did not).
    The list belongs to this server alone; the server is shut down after the test.
    """
    seen: list[str] = []

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(HELLO_BODY)

        def log_message(self, *args: object) -> None:
            pass  # a test's output is its assertions, not the server's access log

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking")


@pytest.fixture
def chromium_page() -> Iterator[tuple[Any, list[str]]]:
    """A fresh page in headless Chromium (Debian's, driven by playwright), and the list of every
    URL the page requests, in order, so a test can assert a page fetched nothing but itself.

    Skips (saying which) when Chromium or playwright is not installed; the browser is closed after.
    """
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"Chromium is not installed at {CHROMIUM} (Debian package chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            page = browser.new_page()
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            yield page, requests
        finally:
            browser.close()
