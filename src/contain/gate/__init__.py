"""The tool-approval gate: decisions before an action starts, grants, and the review queue.

``Gate.evaluate(ToolCall) -> Decision`` (``contain.decision``; allow / deny / review) from the manifest's ``tools:``
rules; ``mint_grant`` / ``verify_grant`` for signed approvals bound to exact calls; ``ReviewStore``
for pending, approved, denied and expired requests. See docs/gate.md.
"""

from contain.decision import Decision
from contain.gate.digests import argument_digest, canonical_json, tool_digest
from contain.gate.grants import (
    Grant,
    GrantCheck,
    GrantKey,
    GrantScope,
    MemoryUseCounter,
    SqliteUseCounter,
    UseCounter,
    decode_grant,
    describe_scope,
    mint_grant,
    parse_duration,
    verify_grant,
)
from contain.gate.model import Gate, ToolCall
from contain.gate.store import (
    ReviewRequest,
    ReviewState,
    ReviewStore,
    default_key_path,
    default_state_dir,
    default_store_path,
)

__all__ = [
    "Decision",
    "Gate",
    "Grant",
    "GrantCheck",
    "GrantKey",
    "GrantScope",
    "MemoryUseCounter",
    "ReviewRequest",
    "ReviewState",
    "ReviewStore",
    "SqliteUseCounter",
    "ToolCall",
    "UseCounter",
    "argument_digest",
    "canonical_json",
    "decode_grant",
    "default_key_path",
    "default_state_dir",
    "default_store_path",
    "describe_scope",
    "mint_grant",
    "parse_duration",
    "tool_digest",
    "verify_grant",
]
