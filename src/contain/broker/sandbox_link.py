"""What ``contain run`` hands a sandbox whose manifest names ``records``: token, socket, client.

``attachments_for`` mints a capability token scoped to the boundary's task, principal and the
union of ``records[*].actions``, valid ``ttl_s`` seconds, and returns three attachments:
/.contain/broker-token (the token, read-only), /.contain/broker.sock (the broker's Unix socket,
bound in) and /.contain/broker-client (the stdlib client script, read-only).

What is enforced: no token for a boundary without a principal (writes must be on someone's
behalf) or without records. What is not: the broker must be running and listening on
``socket_path``. The sandbox connects as its host uid (a leased uid, or nobody with write
binds): bubblewrap binds the socket by path as that uid, so the socket's directory must be
traversable by it (not the broker's 0700 state directory), and the broker admits the uid by its
peer table (``peers.PEER_RULES``), not by the file's mode.
"""

from __future__ import annotations

import os

from contain.boundary.model import Boundary
from contain.boundary.plain import PlainBoundary
from contain.broker.client import client_script_bytes
from contain.broker.tokens import TokenKey, mint_token
from contain.errors import BoundaryInvalid
from contain.runtime.attachments import Attachment

__all__ = [
    "SANDBOX_CLIENT_PATH",
    "SANDBOX_SOCKET_PATH",
    "SANDBOX_TOKEN_PATH",
    "attachments_for",
    "attachments_from_config",
    "token_for",
]

SANDBOX_TOKEN_PATH = "/.contain/broker-token"
SANDBOX_SOCKET_PATH = "/.contain/broker.sock"
SANDBOX_CLIENT_PATH = "/.contain/broker-client"


def token_for(
    boundary: Boundary | PlainBoundary, *, token_key: TokenKey, ttl_s: float, now: float | None = None
) -> str:
    """Mint the task token for ``boundary`` (task, principal, records' actions).

    Raises:
        BoundaryInvalid: the boundary has no records or no principal.
    """
    actions = sorted({a for record in boundary.records for a in record.actions})
    if not actions:
        raise BoundaryInvalid(
            "the boundary names no records, so no broker token is minted",
            "add records: [{name: ..., actions: [...]}] to the manifest",
        )
    if not boundary.principal:
        raise BoundaryInvalid(
            "the boundary has records but no principal",
            "set principal: <on whose behalf writes happen> in the manifest",
        )
    return mint_token(
        token_key, task=boundary.task, principal=boundary.principal, actions=actions, ttl_s=ttl_s, now=now
    )


def attachments_for(
    boundary: Boundary | PlainBoundary, *, socket_path: str | os.PathLike[str], token_key: TokenKey, ttl_s: float
) -> list[Attachment]:
    """Return the attachments that connect a sandbox to the broker (see the module docstring).

    Raises:
        BoundaryInvalid: the boundary has no records or no principal.
    """
    token = token_for(boundary, token_key=token_key, ttl_s=ttl_s)
    return [
        Attachment(SANDBOX_TOKEN_PATH, data=token.encode() + b"\n"),
        Attachment(SANDBOX_SOCKET_PATH, host_path=os.fspath(socket_path)),
        Attachment(SANDBOX_CLIENT_PATH, data=client_script_bytes()),
    ]


def attachments_from_config(
    boundary: Boundary | PlainBoundary, config_path: str | os.PathLike[str], *, ttl_s: float
) -> list[Attachment]:
    """``attachments_for`` with the socket and token key named by a broker.yaml (for ``contain run``).

    Raises:
        BoundaryInvalid: the config is invalid, or the boundary has no records or no principal.
        PermissionError: the token key file is readable by group or others.
    """
    from contain.broker.config import load_config

    config = load_config(os.fspath(config_path))
    return attachments_for(
        boundary, socket_path=config.socket_path, token_key=TokenKey.load_or_create(config.token_key_file), ttl_s=ttl_s
    )
