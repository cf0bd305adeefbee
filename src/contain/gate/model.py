"""The gate: a tool call in, ``allow`` / ``deny`` / ``review`` out, with the rule that decided and why.

Order of evaluation (each step can end it):

1. The arguments must be a JSON object of plain JSON values and satisfy the tool's input schema
   (``schema.validate_arguments``). Malformed arguments are denied with rule id ``schema``, before
   any rule is consulted, so a rule never judges a value the tool would read differently.
2. The rules whose name glob matches the tool are taken in the order deny, review, allow (and in
   manifest order within a verdict). The first that *applies* (``rules.CompiledRule.admits``)
   decides. So deny beats review beats allow across all matching rules, exactly.
3. No rule applies: the ``unknown`` verdict (deny by default; review when configured). The rule id
   is ``unknown-tool`` when no rule names the tool, ``no-matching-rule`` when rules name it but
   their constraints exclude these arguments; the reason then names the failed constraint.
4. Any exception inside evaluation is a deny with rule id ``error`` (fail closed).

What is not decided here: whether the tool definition is the pinned one (the MCP gateway compares
``tool_digest`` with its pin), and whether a grant covers a ``review`` call (``grants.verify_grant``,
checked again where the action happens).

Performance: rules are indexed by exact name (a dict) and, for globs, by the literal text before the
first ``*`` (or, for globs starting with ``*``, after the last one); the candidate list for a tool
name is cached (bounded). A call costs a few dict look-ups plus the constraints of the candidate
rules, independent of the total number of rules. Globs with no literal prefix or suffix (``*``,
``*read*``) are matched one by one for every tool name not yet cached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contain._log import LazyLogger
from contain.boundary import Boundary, ToolRule, ToolVerdict
from contain.decision import Decision
from contain.errors import BoundaryInvalid
from contain.gate.rules import CompiledRule, compile_rule, glob_prefix, glob_suffix
from contain.gate.schema import validate_arguments

__all__ = ["Gate", "ToolCall"]

log = LazyLogger(__name__)

# Deny is tried first, then review, then allow: the first rule that applies decides.
_VERDICT_ORDER = {ToolVerdict.DENY: 0, ToolVerdict.REVIEW: 1, ToolVerdict.ALLOW: 2}
_CANDIDATE_CACHE_SIZE = 4096


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the gate sees it.

    ``tool`` is the name rules match (``fs__write_file`` behind the gateway). ``input_schema`` is the
    (pinned) JSON Schema the arguments must satisfy; None skips schema validation, not the rules.
    """

    principal: str
    server: str
    tool: str
    tool_digest: str
    arguments: Mapping[str, Any]
    input_schema: Mapping[str, Any] | None = None


@dataclass
class _Index:
    exact: dict[str, list[CompiledRule]] = field(default_factory=dict)
    by_prefix: dict[str, list[CompiledRule]] = field(default_factory=dict)
    by_suffix: dict[str, list[CompiledRule]] = field(default_factory=dict)
    unanchored: list[CompiledRule] = field(default_factory=list)
    prefix_lengths: tuple[int, ...] = ()
    suffix_lengths: tuple[int, ...] = ()


def _build_index(compiled: Sequence[CompiledRule]) -> _Index:
    """Exact names in a dict; globs by their literal prefix, else by their literal suffix, else
    (``*``, ``*read*``) in a list scanned for every new tool name. Look-ups only narrow the
    candidates: every candidate's full glob is matched before it counts."""
    index = _Index()
    for rule in compiled:
        name = rule.rule.name
        if "*" not in name:
            index.exact.setdefault(name, []).append(rule)
        elif prefix := glob_prefix(name):
            index.by_prefix.setdefault(prefix, []).append(rule)
        elif suffix := glob_suffix(name):
            index.by_suffix.setdefault(suffix, []).append(rule)
        else:
            index.unanchored.append(rule)
    index.prefix_lengths = tuple(sorted({len(p) for p in index.by_prefix}))
    index.suffix_lengths = tuple(sorted({len(p) for p in index.by_suffix}))
    return index


class Gate:
    """Decides tool calls from the manifest's ``tools:`` rules.

    Args:
        rules: the rules, in manifest order (their ids are ``tools[i]``).
        unknown: the verdict when no rule applies: deny (default) or review. Allow is refused:
            it would make every unlisted tool callable.

    Raises:
        ValueError: when ``unknown`` is allow.
        BoundaryInvalid: when a rule's ``under`` root or ``hosts`` entry is unusable (the cause
            names ``tools[i]``).
    """

    def __init__(self, rules: Sequence[ToolRule], *, unknown: ToolVerdict = ToolVerdict.DENY) -> None:
        if unknown is ToolVerdict.ALLOW:
            raise ValueError("unknown=allow would let every unlisted tool run; use deny or review")
        self._unknown = unknown
        try:
            self._compiled = tuple(compile_rule(rule, index=i) for i, rule in enumerate(rules))
        except ValueError as exc:
            raise BoundaryInvalid(
                f"a tools rule cannot be used by the gate: {exc}",
                "fix that rule in the manifest's tools section",
            ) from exc
        self._index = _build_index(self._compiled)
        self._candidates_cache: dict[str, tuple[CompiledRule, ...]] = {}

    @classmethod
    def from_boundary(cls, boundary: Boundary, *, unknown: ToolVerdict = ToolVerdict.DENY) -> Gate:
        """Build a gate from ``boundary.tools``."""
        return cls(boundary.tools, unknown=unknown)

    @property
    def rules(self) -> tuple[CompiledRule, ...]:
        """The compiled rules, in manifest order."""
        return self._compiled

    def candidates(self, tool: str) -> tuple[CompiledRule, ...]:
        """The rules whose name glob matches ``tool``, ordered deny, review, allow, then by index."""
        cached = self._candidates_cache.get(tool)
        if cached is not None:
            return cached
        index = self._index
        found = list(index.exact.get(tool, ()))
        groups = [index.by_prefix.get(tool[:n], ()) for n in index.prefix_lengths if n <= len(tool)]
        groups += [index.by_suffix.get(tool[len(tool) - n :], ()) for n in index.suffix_lengths if n <= len(tool)]
        groups.append(index.unanchored)
        found.extend(rule for group in groups for rule in group if rule.matches_name(tool))
        ordered = tuple(sorted(found, key=lambda r: (_VERDICT_ORDER[r.verdict], r.index)))
        if len(self._candidates_cache) >= _CANDIDATE_CACHE_SIZE:
            self._candidates_cache.clear()  # bounded: agents can invent tool names
        self._candidates_cache[tool] = ordered
        return ordered

    def evaluate(self, call: ToolCall) -> Decision:
        """Decide one call. Never raises: malformed input and internal errors are denials."""
        try:
            return self._evaluate(call)
        except Exception as exc:  # fail closed: an error in the decision path is a deny
            log.warning("gate error on tool %r: %s", getattr(call, "tool", "?"), exc, exc_info=True)
            return Decision(
                ToolVerdict.DENY,
                "error",
                f"the gate could not evaluate this call ({type(exc).__name__}: {exc}), so it is denied",
            )

    def _evaluate(self, call: ToolCall) -> Decision:
        check = validate_arguments(call.arguments, call.input_schema)
        if not check.ok:
            return Decision(ToolVerdict.DENY, "schema", check.reason)
        if not isinstance(call.tool, str) or not call.tool:
            return Decision(ToolVerdict.DENY, "schema", "the call names no tool")
        arguments = dict(call.arguments)
        misses: list[str] = []
        for rule in self.candidates(call.tool):
            applies, why = rule.admits(arguments)
            if applies:
                return Decision(rule.verdict, rule.rule_id, _sentence(rule, call.tool))
            if rule.verdict is not ToolVerdict.DENY:
                misses.append(f"{rule.rule_id} ({rule.verdict.value} {rule.rule.name}) does not apply: {why}")
        return self._unknown_decision(call.tool, misses)

    def _unknown_decision(self, tool: str, misses: list[str]) -> Decision:
        what = "denied" if self._unknown is ToolVerdict.DENY else "sent for human review"
        if misses:
            return Decision(
                self._unknown,
                "no-matching-rule",
                f"no rule permits this call to {tool}, so it is {what}: " + "; ".join(misses),
            )
        return Decision(
            self._unknown,
            "unknown-tool",
            f"no rule in the manifest's tools section names {tool}, so it is {what}; "
            "use a listed tool or ask the user to add a rule",
        )


def _sentence(rule: CompiledRule, tool: str) -> str:
    where = f"{rule.rule_id} ({rule.rule.verdict.value} {rule.rule.name})"
    if rule.verdict is ToolVerdict.ALLOW:
        return f"{where} allows this call to {tool}"
    if rule.verdict is ToolVerdict.REVIEW:
        return (
            f"{where} requires a human review of this call to {tool}; it runs only with a grant "
            "approved for exactly these arguments"
        )
    return f"{where} denies this call to {tool}; do not retry it, choose another way or ask the user"
