"""The trusted write broker: credentials stay outside, every write authorized, done once, on a ledger.

``Decision`` (``contain.decision``, re-exported for action authors) is what ``authorize`` and ``validate``
return. ``Broker`` (core) decides and executes; ``BrokerServer`` (service) serves it as JSON over a Unix
socket; ``Store`` backends (SQLite WAL, PostgreSQL) keep the hash-chained ledger and the
idempotency records; ``mint_token``/``verify_token`` are the callers' capability tokens;
``attachments_for`` connects a sandbox. See docs/broker.md.
"""

from contain.broker.actions import (
    Action,
    ActionFailed,
    CheckResult,
    ExecContext,
    Intent,
    Principal,
    Secret,
    SecretStore,
    action_tool_digest,
)
from contain.broker.client import BrokerClient, Reply, client_script_bytes
from contain.broker.config import ActionRef, BrokerConfig, load_actions, load_config
from contain.broker.core import Broker, BrokerReply, BrokerRequest
from contain.broker.idempotency import IdempotencyRecord, assign_key, plan_claim, record_key
from contain.broker.ledger import (
    Checkpoint,
    Checkpointer,
    LedgerEntry,
    LedgerProblem,
    entry_hash,
    load_checkpoint_key,
    load_public_key,
    plan_entry,
    read_checkpoints,
    verify_entries,
)
from contain.broker.sandbox_link import attachments_for, attachments_from_config, token_for
from contain.broker.service import BrokerServer, build_broker, openapi_document
from contain.broker.storage import PostgresStore, SqliteStore, Store, open_store
from contain.broker.tokens import TokenCheck, TokenKey, TokenScope, attenuate, mint_token, verify_token
from contain.broker.verification import LedgerVerdict, verify_ledger
from contain.decision import Decision

__all__ = [
    "Action",
    "ActionFailed",
    "ActionRef",
    "Broker",
    "BrokerClient",
    "BrokerConfig",
    "BrokerReply",
    "BrokerRequest",
    "BrokerServer",
    "CheckResult",
    "Checkpoint",
    "Checkpointer",
    "Decision",
    "ExecContext",
    "IdempotencyRecord",
    "Intent",
    "LedgerEntry",
    "LedgerProblem",
    "LedgerVerdict",
    "PostgresStore",
    "Principal",
    "Reply",
    "Secret",
    "SecretStore",
    "SqliteStore",
    "Store",
    "TokenCheck",
    "TokenKey",
    "TokenScope",
    "action_tool_digest",
    "assign_key",
    "attachments_for",
    "attachments_from_config",
    "attenuate",
    "build_broker",
    "client_script_bytes",
    "entry_hash",
    "load_actions",
    "load_checkpoint_key",
    "load_config",
    "load_public_key",
    "mint_token",
    "open_store",
    "openapi_document",
    "plan_claim",
    "plan_entry",
    "read_checkpoints",
    "record_key",
    "token_for",
    "verify_entries",
    "verify_ledger",
    "verify_token",
]
