"""Listen addresses: loopback only, because the MCP endpoints do not authenticate clients."""

from __future__ import annotations

import pytest

from contain.errors import GateError
from contain.mcp.transport import parse_listen_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8931", ("127.0.0.1", 8931)),
        ("localhost:0", ("127.0.0.1", 0)),
        ("[::1]:9000", ("::1", 9000)),
        ("127.8.9.10:1", ("127.8.9.10", 1)),
    ],
)
def test_loopback_addresses_are_accepted(text, expected):
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["0.0.0.0:8931", "[::]:1", "192.168.1.2:80", "example.com:80"])
def test_other_addresses_are_refused_with_a_fix(text):
    with pytest.raises(GateError) as info:
        parse_listen_address(text)
    assert "loopback" in info.value.cause or "HOST:PORT" in info.value.cause
    assert info.value.fix


@pytest.mark.parametrize("text", ["8931", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:http"])
def test_malformed_addresses_are_refused(text):
    with pytest.raises(GateError, match="HOST:PORT"):
        parse_listen_address(text)
