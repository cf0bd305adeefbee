"""The MCP gateway: upstream tools exposed as ``server__tool``, every call through pins and the gate.

Listing (``tools/list``): every upstream is listed concurrently, each under its own
``limits.list_timeout_s``; an upstream that times out, fails or breaks a listing rule
(``contain.mcp.exposure``) is left out with a logged reason (``event: upstream-dropped``), and the
others are listed. Each listed tool is planned (name charset, size, schema keys), checked against
its pin (``contain.mcp.pins``) and, when it matches, exposed in its cleaned form.

For every ``tools/call`` the gateway, in this order (each step can end it):

1. splits the exposed name into server and upstream tool, and lists that server's tools *now*
   (within its list timeout; a failure refuses with ``upstream-unavailable``), checking each
   against its pin: a tool whose definition changed since it was pinned is withheld (rule
   ``pin-changed``), a tool added after the upstream's first listing is withheld until approved
   (``tool-not-approved``, with ``new_tools: withhold``); an unknown or refused name is
   ``unknown-tool``. Listing at call time costs one round trip per call, and closes the gap where
   an upstream changes a definition between the client's listing and a call;
2. takes the reserved argument ``_contain_grant`` (a grant token) out of the arguments: it is
   never forwarded and is not part of the argument digest;
3. replaces the arguments with their canonical form (``contain.gate.digests.canonical_json``,
   parsed back): ``1.0`` becomes ``1``. From here on only that form is used: it is what the
   schema check sees, what the digest covers, what a reviewer is shown and what the upstream
   receives, so an approval of ``{"n": 1}`` forwards exactly ``{"n": 1}``;
4. validates them against the *pinned* input schema; malformed arguments are refused (rule
   ``schema``) before the upstream sees anything;
5. asks the gate (``contain.gate.Gate``) with the pinned tool digest; an exception is a deny;
6. ``allow``: forwards. ``deny``: an error result (``isError: true``) naming the rule and reason,
   whatever grant was offered. ``review``: with a grant token, ``verify_grant`` for exactly this
   principal, tool, tool digest and argument digest (a use is consumed), then forwards; without
   one, a grant a reviewer already approved for this exact call (found in the review store) is
   verified the same way; failing that, the call is submitted to the review queue and the agent
   gets a "pending" error result with the request id, or (``wait_s > 0``) the gateway waits for
   the decision and, when approved, verifies the minted grant like any other. So after an
   approval the agent may simply retry the same call, or pass the token itself;
7. forwards within ``limits.call_timeout_s`` (past it: ``upstream-timeout``), then applies
   ``contain.mcp.status.RESERVED_CHANNEL_RULES`` to the result and sets the gateway's status in
   ``_meta["contain/status"]`` (the only place the gateway's status lives);
8. logs the call and its outcome as one JSON line (argument digest, never argument values).

Not enforced here: what the upstream does with an allowed call (run it with ``sandbox: true`` to
bound that), what results say (beyond the reserved status channel, results pass through, and a
result can carry text that tries to steer the agent), resources, prompts and sampling (not
proxied at all: only tools are). A timed-out call may still run to completion upstream: the
gateway stops waiting, it cannot undo what the upstream does.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import mcp_types as types

from contain._log import LazyLogger
from contain.boundary.model import ToolVerdict
from contain.decision import Decision
from contain.gate.digests import argument_digest, canonical_json
from contain.gate.grants import GrantCheck, GrantKey, UseCounter, verify_grant
from contain.gate.model import Gate, ToolCall
from contain.gate.schema import validate_arguments
from contain.mcp.config import UpstreamLimits
from contain.mcp.exposure import GRANT_ARGUMENT, NAME_SEPARATOR, exposed_name, exposed_tool, plan_listing
from contain.mcp.pins import NewToolPolicy, PinState, PinStore, ToolDefinition
from contain.mcp.review import ReviewQueue, ReviewState, ReviewStatus
from contain.mcp.status import gateway_result, scrub_upstream_result, with_status

__all__ = [
    "GRANT_ARGUMENT",
    "NAME_SEPARATOR",
    "CallLog",
    "Gateway",
    "UpstreamSession",
    "exposed_name",
    "split_exposed_name",
]

log = LazyLogger(__name__)


class UpstreamSession(Protocol):
    """What the gateway needs from one upstream server (an ``mcp.Client`` adapter, or a fake)."""

    async def list_tools(self) -> list[types.Tool]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult: ...


def split_exposed_name(name: str) -> tuple[str, str] | None:
    """``server__tool`` -> (server, tool); None when there is no separator or a part is empty."""
    server, sep, tool = name.partition(NAME_SEPARATOR)
    if not sep or not server or not tool:
        return None
    return server, tool


class CallLog:
    """Appends one JSON object per line to a file (0600), flushed per line; thread-safe.

    Lines are ASCII (``ensure_ascii``): a tool name or reason carrying escapes or invisible
    characters shows as ``\\u001b`` when the log is read in a terminal; the values stay exact.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(dict(record), sort_keys=True, ensure_ascii=True, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class UpstreamUnavailable(Exception):
    """An upstream's listing failed, timed out or broke an upstream-wide rule (internal to the gateway).

    ``str(exc)`` is written by the gateway and may reach the agent; ``detail`` can hold the
    upstream's own words (an error message) and goes only to the log: a gateway message that
    begins with ``contain:`` must not carry text an upstream chose.
    """

    def __init__(self, reason: str, *, detail: str = "") -> None:
        super().__init__(reason)
        self.detail = detail


@dataclass(frozen=True)
class _Resolved:
    """An upstream tool found in a fresh listing, with its pin state."""

    server: str
    name: str  # the upstream's name for it
    definition: ToolDefinition | None  # the pinned definition (schema and digest the gate uses); None: no pin
    digest: str  # the pinned digest, or the offered one for a withheld new tool
    state: PinState


class Gateway:
    """Transport-agnostic gateway core; ``contain.mcp.serve_gateway`` puts an MCP server in front.

    Args:
        upstreams: connected upstream sessions by server name.
        gate: the gate built from the boundary's ``tools:`` rules.
        pins: the pin store.
        reviews: where ``review`` calls are queued.
        grant_key: the key grants are verified with.
        uses: the grant use counter (shared with every other verifier of the same grants).
        principal: on whose behalf calls are made.
        call_log: where every call and decision is written.
        limits: per-upstream timeouts and listing bounds (an upstream not named gets the defaults).
        new_tools: what happens to a tool an upstream adds after its first listing.
        wait_s: how long a ``review`` call waits for a decision (0: answer "pending" at once).
        poll_interval_s: how often the review queue is read while waiting.
        clock: seconds since the epoch (grant expiry); tests inject one.
        sleep: the async sleep used while waiting; tests inject one.
    """

    def __init__(
        self,
        *,
        upstreams: Mapping[str, UpstreamSession],
        gate: Gate,
        pins: PinStore,
        reviews: ReviewQueue,
        grant_key: GrantKey,
        uses: UseCounter,
        principal: str,
        call_log: CallLog,
        limits: Mapping[str, UpstreamLimits] | None = None,
        new_tools: NewToolPolicy = NewToolPolicy.WITHHOLD,
        wait_s: float = 0.0,
        poll_interval_s: float = 0.25,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.upstreams = dict(upstreams)
        self.gate = gate
        self.pins = pins
        self.reviews = reviews
        self.grant_key = grant_key
        self.uses = uses
        self.principal = principal
        self.call_log = call_log
        self.limits = {server: (limits or {}).get(server, UpstreamLimits()) for server in self.upstreams}
        self.new_tools = new_tools
        self.wait_s = wait_s
        self.poll_interval_s = poll_interval_s
        self._clock = clock
        self._sleep = sleep

    # -- listing ---------------------------------------------------------------------------------

    def _event(self, event: str, **fields: Any) -> None:
        self.call_log.write({"time": self._clock(), "event": event, **fields})

    async def _list_server(self, server: str) -> list[_Resolved]:
        """List one upstream's tools (within its timeout), plan them and check each against its pin.

        Raises:
            UpstreamUnavailable: the listing failed, timed out, or broke an upstream-wide rule.
        """
        limits = self.limits[server]
        try:
            with anyio.fail_after(limits.list_timeout_s):
                listed = await self.upstreams[server].list_tools()
        except TimeoutError as exc:
            raise UpstreamUnavailable(f"tools/list did not answer within {limits.list_timeout_s} s") from exc
        except Exception as exc:  # any failure of this upstream is this upstream's alone
            raise UpstreamUnavailable(
                f"tools/list failed ({type(exc).__name__})", detail=f"{type(exc).__name__}: {exc}"
            ) from exc
        plan = plan_listing(
            server, listed, max_tools=limits.max_tools, max_definition_bytes=limits.max_definition_bytes
        )
        if plan.dropped is not None:
            raise UpstreamUnavailable(plan.dropped.to_log()["reason"])
        for refusal in plan.refused:
            self._event("refused", **refusal.to_log())
        checks = self.pins.check_all(server, plan.offered, new_tools=self.new_tools, max_tools=limits.max_tools)
        resolved = []
        for definition, check in zip(plan.offered, checks, strict=True):
            if check.state is PinState.NEW_WITHHELD:
                self._event("withheld", server=server, upstream_tool=definition.name, offered_digest=definition.digest,
                            rule_id="tool-not-approved",
                            reason="a tool added after the upstream's first listing waits for approval")
                resolved.append(_Resolved(server, definition.name, None, definition.digest, check.state))
                continue
            assert check.pin is not None
            if check.state is PinState.CHANGED:
                self._event("withheld", server=server, upstream_tool=definition.name, pinned_digest=check.pin.digest,
                            offered_digest=check.pin.candidate_digest, rule_id="pin-changed",
                            reason="the definition differs from the pinned one")
            elif check.state is PinState.NEW:
                self._event("pinned", server=server, upstream_tool=definition.name, digest=check.pin.digest)
            resolved.append(_Resolved(server, definition.name, check.pin.definition, check.pin.digest, check.state))
        return resolved

    async def list_tools(self) -> list[types.Tool]:
        """Every upstream's tools whose definition matches its pin, namespaced and cleaned.

        Upstreams are listed concurrently; one that fails is left out (logged), never the others.
        """
        listings: dict[str, list[_Resolved]] = {}

        async def list_one(server: str) -> None:
            try:
                listings[server] = await self._list_server(server)
            except UpstreamUnavailable as exc:
                self._event("upstream-dropped", server=server, reason=str(exc), detail=exc.detail)
                log.warning("upstream %s left out of the listing: %s", server, exc)
            except Exception as exc:  # fail closed for this upstream only: its tools are not listed
                log.exception("listing upstream %s failed", server)
                self._event("upstream-dropped", server=server, reason=f"the gateway failed: {type(exc).__name__}")

        async with anyio.create_task_group() as tasks:
            for server in self.upstreams:
                tasks.start_soon(list_one, server)
        exposed: list[types.Tool] = []
        for server in self.upstreams:  # config order, whatever order the listings finished in
            for item in listings.get(server, []):
                if item.state not in (PinState.NEW, PinState.MATCH) or item.definition is None:
                    continue
                shown = exposed_tool(server, item.definition)
                if shown.removed:
                    self._event("sanitized", server=server, upstream_tool=item.name, removed=shown.removed)
                exposed.append(shown.tool)
        return exposed

    # -- calls -----------------------------------------------------------------------------------

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        """Decide and (maybe) forward one call; see the module docstring for the steps."""
        began = time.perf_counter()
        record: dict[str, Any] = {"time": self._clock(), "event": "call", "principal": self.principal, "tool": name}
        try:
            result = await self._call(name, dict(arguments or {}), record)
        except Exception as exc:  # fail closed: an error anywhere in the decision path refuses
            log.exception("gateway call %s failed", name)
            record.update(outcome="error", rule_id="error", reason=f"{type(exc).__name__}: {exc}")
            result = gateway_result(
                f"contain: the call was refused because the gateway failed: {type(exc).__name__}",
                status={"status": "error", "rule_id": "error"},
                is_error=True,
            )
        record["duration_ms"] = round((time.perf_counter() - began) * 1000, 3)
        self.call_log.write(record)
        return result

    def _refuse(self, record: dict[str, Any], decision: Decision, *, outcome: str = "refused") -> types.CallToolResult:
        record.update(outcome=outcome, verdict=str(decision.verdict), rule_id=decision.rule_id, reason=decision.reason)
        return gateway_result(
            f"contain: {record['tool']} was refused by {decision.rule_id}: {decision.reason}",
            status={"status": "denied", "rule_id": decision.rule_id, "reason": decision.reason},
            is_error=True,
        )

    async def _call(self, name: str, arguments: dict[str, Any], record: dict[str, Any]) -> types.CallToolResult:
        parts = split_exposed_name(name)
        if parts is None or parts[0] not in self.upstreams:
            return self._refuse(record, Decision(ToolVerdict.DENY, "unknown-tool", f"no upstream serves {name!r}"))
        server, tool = parts
        record.update(server=server, upstream_tool=tool)
        try:
            listing = await self._list_server(server)
        except UpstreamUnavailable as exc:
            record["upstream_error"] = exc.detail
            return self._refuse(record, Decision(ToolVerdict.DENY, "upstream-unavailable", str(exc)))
        found = [item for item in listing if item.name == tool]
        if len(found) != 1:
            return self._refuse(record, Decision(ToolVerdict.DENY, "unknown-tool", f"{server} has no tool {tool!r}"))
        item = found[0]
        record["tool_digest"] = item.digest
        if item.state is PinState.CHANGED:
            reason = "its definition changed since it was pinned; approve it with `contain mcp pins approve`"
            return self._refuse(record, Decision(ToolVerdict.DENY, "pin-changed", reason))
        if item.state is PinState.NEW_WITHHELD or item.definition is None:
            reason = "it was added after the upstream's first listing; approve it with `contain mcp pins approve`"
            return self._refuse(record, Decision(ToolVerdict.DENY, "tool-not-approved", reason))
        grant = arguments.pop(GRANT_ARGUMENT, None)
        if grant is not None and not isinstance(grant, str):
            return self._refuse(record, Decision(ToolVerdict.DENY, "schema", f"{GRANT_ARGUMENT} must be a string"))
        try:
            # The canonical form is the only one used from here on: checked, digested, shown to a
            # reviewer and forwarded. 1.0 and 1 are one JSON number to the digest, so the upstream
            # must receive the form the digest covers, not the client's spelling.
            canonical: dict[str, Any] = json.loads(canonical_json(arguments))
        except ValueError as exc:
            return self._refuse(record, Decision(ToolVerdict.DENY, "schema", f"arguments are not JSON: {exc}"))
        schema = item.definition.input_schema
        check = validate_arguments(canonical, schema)
        if not check.ok:
            return self._refuse(record, Decision(ToolVerdict.DENY, "schema", check.reason))
        digest = argument_digest(canonical)
        record["argument_digest"] = digest
        call = ToolCall(self.principal, server, name, item.digest, canonical, schema)
        decision = self.gate.evaluate(call)
        record.update(verdict=str(decision.verdict), rule_id=decision.rule_id, reason=decision.reason)
        if decision.verdict is ToolVerdict.DENY:
            return self._refuse(record, decision)
        if decision.verdict is ToolVerdict.REVIEW:
            refusal = await self._authorize_review(record, call, decision, grant, digest)
            if refusal is not None:
                return refusal
        return await self._forward(record, server, tool, canonical)

    async def _authorize_review(
        self, record: dict[str, Any], call: ToolCall, decision: Decision, grant: str | None, digest: str
    ) -> types.CallToolResult | None:
        """None when a valid grant covers this exact call (a use is consumed); else the refusal."""
        if grant is None:
            stored = self.reviews.approved_grant(call)
            if stored is not None:
                # A reviewer approved this exact call: the agent's retry uses the minted grant.
                stored_check = self._verify(stored, call.tool, call.tool_digest, digest)
                if stored_check.ok:
                    record["grant_source"] = "store"
                    record["grant_id"] = stored_check.grant.grant_id if stored_check.grant else None
                    return None
                record["stored_grant_refused"] = stored_check.reason  # used up or expired: ask again
            request_id = self.reviews.submit(call, decision)
            record["request_id"] = request_id
            status = await self._wait_for_decision(request_id)
            if status.state is ReviewState.DENIED:
                reason = status.reason or "a reviewer denied it"
                return self._refuse(record, Decision(ToolVerdict.DENY, "review-denied", reason))
            if status.state is not ReviewState.APPROVED or status.grant_token is None:
                return self._pending(record, request_id, decision, status.state)
            grant, record["grant_source"] = status.grant_token, "wait"
        else:
            record["grant_source"] = "argument"
        check = self._verify(grant, call.tool, call.tool_digest, digest)
        record["grant_id"] = check.grant.grant_id if check.grant is not None else None
        if not check.ok:
            return self._refuse(record, Decision(ToolVerdict.DENY, "grant", check.reason))
        return None

    def _verify(self, token: str, tool: str, tool_digest: str, digest: str) -> GrantCheck:
        return verify_grant(
            self.grant_key,
            token,
            principal=self.principal,
            tool=tool,
            tool_digest=tool_digest,
            argument_digest=digest,
            uses=self.uses,
            now=self._clock(),
        )

    async def _wait_for_decision(self, request_id: str) -> ReviewStatus:
        status = self.reviews.status(request_id)
        deadline = time.monotonic() + self.wait_s
        while status.state is ReviewState.PENDING and time.monotonic() < deadline:
            await self._sleep(min(self.poll_interval_s, max(0.0, deadline - time.monotonic())))
            status = self.reviews.status(request_id)
        return status

    def _pending(
        self, record: dict[str, Any], request_id: str, decision: Decision, state: ReviewState
    ) -> types.CallToolResult:
        record["outcome"] = "pending" if state is ReviewState.PENDING else str(state)
        text = (
            f"contain: {record['tool']} needs a reviewer's approval ({decision.rule_id}: {decision.reason}). "
            f"Request {request_id} is {state}. After approval, call again with the same arguments and "
            f"{GRANT_ARGUMENT} set to the grant token."
        )
        return gateway_result(
            text,
            status={"status": str(state), "request_id": request_id, "rule_id": decision.rule_id,
                    "reason": decision.reason},
            is_error=True,
        )

    async def _forward(
        self, record: dict[str, Any], server: str, tool: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        timeout_s = self.limits[server].call_timeout_s
        try:
            with anyio.fail_after(timeout_s):
                result = await self.upstreams[server].call_tool(tool, arguments)
        except TimeoutError:
            record.update(outcome="upstream-timeout", upstream_error=f"no answer within {timeout_s} s")
            return gateway_result(
                f"contain: upstream {server} did not answer within {timeout_s} s (it may still be running the call)",
                status={"status": "upstream-timeout"},
                is_error=True,
            )
        except Exception as exc:
            record.update(outcome="upstream-error", upstream_error=f"{type(exc).__name__}: {exc}")
            return gateway_result(
                f"contain: upstream {server} failed: {type(exc).__name__}",
                status={"status": "upstream-error"},
                is_error=True,
            )
        scrubbed = scrub_upstream_result(server, result)
        if scrubbed.findings:
            record["reserved_channel"] = scrubbed.findings
        if scrubbed.refused_by is not None:
            rule = scrubbed.refused_by
            record.update(outcome="refused-result", rule_id=rule.rule_id, reason=rule.reason)
            return gateway_result(
                f"contain: the result of {record['tool']} was withheld by {rule.rule_id}: {rule.reason}",
                status={"status": "refused-result", "rule_id": rule.rule_id, "reason": rule.reason},
                is_error=True,
            )
        record.update(outcome="forwarded", upstream_is_error=result.is_error)
        status = {"status": "forwarded", "server": server, "upstream_tool": tool, "upstream_is_error": result.is_error}
        return with_status(scrubbed.result, status)
