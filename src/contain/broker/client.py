"""The host-side client library: the sandbox client plus token minting for trusted callers.

``BrokerClient`` and ``Reply`` are the same stdlib-only code that sandboxes get as
/.contain/broker-client (``sandbox_client``), so host code and model-written code speak one
protocol. ``client_script_bytes()`` returns that file for attaching into a sandbox.

Nothing here holds a write credential: a client only ever has a capability token.
"""

from __future__ import annotations

from pathlib import Path

from contain.broker.sandbox_client import BrokerClient, Reply

__all__ = ["BrokerClient", "Reply", "client_script_bytes"]


def client_script_bytes() -> bytes:
    """The single-file client script attached into sandboxes as /.contain/broker-client."""
    return Path(__file__).with_name("sandbox_client.py").read_bytes()
