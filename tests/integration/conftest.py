"""Fixtures shared by the integration tests (the markers and ``host_tmp`` are in tests/conftest.py)."""

from __future__ import annotations

import http.server
import socketserver
import threading
from collections.abc import Iterator

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
