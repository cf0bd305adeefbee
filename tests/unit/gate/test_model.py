"""The gate: schema first, then deny beats review beats allow, unknown tools denied."""

from collections.abc import Mapping

import pytest

from contain.boundary import Boundary, ToolRule, ToolVerdict
from contain.decision import Decision
from contain.gate.model import Gate, ToolCall


def _gate(rows, **kwargs):
    return Gate([ToolRule.model_validate(r) for r in rows], **kwargs)


def _call(tool, arguments=None, schema=None):
    return ToolCall(
        principal="alice", server="fs", tool=tool, tool_digest="sha256:t", arguments=arguments or {}, input_schema=schema
    )


def test_allow_rule_allows_and_names_itself():
    decision = _gate([{"name": "fs__read_*", "verdict": "allow"}]).evaluate(_call("fs__read_file", {"path": "/x"}))
    assert decision == Decision(ToolVerdict.ALLOW, "tools[0]", "tools[0] (allow fs__read_*) allows this call to fs__read_file")
    assert decision.is_allowed


@pytest.mark.parametrize(
    "order",
    [
        ("allow", "review", "deny"),
        ("deny", "review", "allow"),
        ("review", "allow", "deny"),
        ("allow", "deny", "review"),
    ],
)
def test_deny_beats_review_beats_allow_whatever_the_order(order):
    rows = [{"name": name, "verdict": verdict} for name, verdict in zip(("fs__*", "fs__write_file", "*"), order, strict=True)]
    decision = _gate(rows).evaluate(_call("fs__write_file"))
    assert decision.verdict is ToolVerdict.DENY
    assert decision.rule_id == f"tools[{order.index('deny')}]"
    rows_without_deny = [r for r in rows if r["verdict"] != "deny"]
    decision = _gate(rows_without_deny).evaluate(_call("fs__write_file"))
    assert decision.verdict is ToolVerdict.REVIEW
    assert "runs only with a grant" in decision.reason


def test_first_rule_of_the_winning_verdict_decides():
    gate = _gate([{"name": "a*", "verdict": "allow"}, {"name": "ab", "verdict": "allow"}, {"name": "*", "verdict": "allow"}])
    assert gate.evaluate(_call("ab")).rule_id == "tools[0]"
    assert gate.evaluate(_call("zz")).rule_id == "tools[2]"


def test_unknown_tool_is_denied_by_default_and_review_when_configured():
    rows = [{"name": "fs__read_file", "verdict": "allow"}]
    decision = _gate(rows).evaluate(_call("fs__delete"))
    assert (decision.verdict, decision.rule_id) == (ToolVerdict.DENY, "unknown-tool")
    assert "no rule in the manifest's tools section names fs__delete" in decision.reason
    decision = _gate(rows, unknown=ToolVerdict.REVIEW).evaluate(_call("fs__delete"))
    assert (decision.verdict, decision.rule_id) == (ToolVerdict.REVIEW, "unknown-tool")


def test_unknown_allow_is_refused():
    with pytest.raises(ValueError, match="unknown=allow"):
        _gate([], unknown=ToolVerdict.ALLOW)


def test_an_empty_rule_set_denies_everything():
    assert _gate([]).evaluate(_call("anything")).verdict is ToolVerdict.DENY


def test_allow_rule_whose_constraint_fails_falls_through_to_deny_with_the_constraint_named():
    gate = _gate([{"name": "fs__write_file", "verdict": "allow", "args": {"path": {"under": "/work/out"}}}])
    assert gate.evaluate(_call("fs__write_file", {"path": "/work/out/a.txt"})).verdict is ToolVerdict.ALLOW
    decision = gate.evaluate(_call("fs__write_file", {"path": "/etc/passwd"}))
    assert (decision.verdict, decision.rule_id) == (ToolVerdict.DENY, "no-matching-rule")
    assert "tools[0] (allow fs__write_file) does not apply: argument 'path' '/etc/passwd' is not under /work/out" in decision.reason


def test_allow_rule_whose_constraint_fails_falls_to_a_later_review_rule():
    gate = _gate(
        [
            {"name": "billing.update_invoice", "verdict": "allow", "args": {"amount": {"maximum": 100}}},
            {"name": "billing.update_invoice", "verdict": "review", "args": {"amount": {"maximum": 1000}}},
        ]
    )
    # Both apply to 50: review beats allow.
    assert gate.evaluate(_call("billing.update_invoice", {"amount": 50})).verdict is ToolVerdict.REVIEW
    assert gate.evaluate(_call("billing.update_invoice", {"amount": 500})).rule_id == "tools[1]"
    decision = gate.evaluate(_call("billing.update_invoice", {"amount": 5000}))
    assert decision.verdict is ToolVerdict.DENY
    assert "above the maximum 100" in decision.reason and "above the maximum 1000" in decision.reason


def test_deny_rule_with_constraint_denies_inside_its_region_and_when_undecidable():
    gate = _gate(
        [
            {"name": "pay", "verdict": "deny", "args": {"amount": {"minimum": 1000}}},
            {"name": "pay", "verdict": "allow"},
        ]
    )
    assert gate.evaluate(_call("pay", {"amount": 10})).verdict is ToolVerdict.ALLOW
    assert gate.evaluate(_call("pay", {"amount": 1000})).verdict is ToolVerdict.DENY
    # A string cannot be compared with a bound: the deny rule treats it as inside (fail closed).
    assert gate.evaluate(_call("pay", {"amount": "5000"})).verdict is ToolVerdict.DENY
    # An absent argument is not in the deny rule's region.
    assert gate.evaluate(_call("pay", {})).verdict is ToolVerdict.ALLOW


def test_schema_is_checked_before_any_rule():
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": False}
    gate = _gate([{"name": "*", "verdict": "allow"}])
    assert gate.evaluate(_call("t", {"path": "/x"}, schema)).verdict is ToolVerdict.ALLOW
    for bad in ({}, {"path": 3}, {"path": "/x", "extra": 1}):
        decision = gate.evaluate(_call("t", bad, schema))
        assert (decision.verdict, decision.rule_id) == (ToolVerdict.DENY, "schema"), bad


@pytest.mark.parametrize("arguments", [["a"], {"x": float("nan")}, {"x": (1, 2)}, {1: "x"}, "text", None])
def test_non_json_arguments_are_denied_not_raised(arguments):
    call = ToolCall(principal="p", server="", tool="t", tool_digest="", arguments=arguments)  # type: ignore[arg-type]
    decision = _gate([{"name": "*", "verdict": "allow"}]).evaluate(call)
    assert (decision.verdict, decision.rule_id) == (ToolVerdict.DENY, "schema")


class _ExplodingArguments(Mapping):
    def __iter__(self):
        return iter(["a"])

    def __len__(self):
        return 1

    def __getitem__(self, key):
        raise RuntimeError("boom")


def test_internal_errors_deny():
    gate = _gate([{"name": "*", "verdict": "allow"}])
    decision = gate.evaluate(_call("t", _ExplodingArguments()))
    assert (decision.verdict, decision.rule_id) == (ToolVerdict.DENY, "error")


def test_from_boundary_uses_the_manifest_tools_in_order():
    boundary = Boundary.model_validate(
        {"tools": [{"name": "billing.read_*", "verdict": "allow"}, {"name": "billing.update_invoice", "verdict": "review"}]}
    )
    gate = Gate.from_boundary(boundary)
    assert gate.evaluate(_call("billing.read_invoice")).rule_id == "tools[0]"
    assert gate.evaluate(_call("billing.update_invoice")).verdict is ToolVerdict.REVIEW


def test_index_agrees_with_a_naive_scan_over_many_rules():
    import random

    rng = random.Random(7)
    names = [f"svc{i % 13}__{w}{i}" for i, w in enumerate(rng.choices(["read", "write", "del"], k=300))]
    rows = []
    for i, name in enumerate(names):
        cut = rng.randrange(1, len(name))
        pattern = [name[:cut] + "*", name, "*" + name[cut:], "*" + name[cut - 1 : cut + 2] + "*", name][i % 5]
        rows.append({"name": pattern, "verdict": rng.choice(["allow", "deny", "review"])})
    rows.append({"name": "*__read*", "verdict": "allow"})
    gate = _gate(rows)
    order = {ToolVerdict.DENY: 0, ToolVerdict.REVIEW: 1, ToolVerdict.ALLOW: 2}
    import fnmatch

    assert gate.evaluate(_call("")).rule_id == "schema"  # an empty name is refused before the rules
    probes = [*names, "svc1__readX", "zzz", "svc"]
    probes += [n[: len(n) // 2] + "Q" + n[len(n) // 2 :] for n in names[:100]] + [n + "1" for n in names[:100]]
    unknown = 0
    for tool in probes:
        matching = [(order[ToolVerdict(r["verdict"])], i) for i, r in enumerate(rows) if fnmatch.fnmatchcase(tool, r["name"])]
        expected = f"tools[{min(matching)[1]}]" if matching else None
        decision = gate.evaluate(_call(tool))
        if expected is None:
            assert decision.verdict is ToolVerdict.DENY and decision.rule_id == "unknown-tool"
            unknown += 1
        else:
            assert decision.rule_id == expected, tool
    assert 0 < unknown < len(probes)  # both paths were exercised


def test_an_unusable_rule_is_a_boundary_error_naming_the_rule():
    from contain.errors import BoundaryInvalid

    with pytest.raises(BoundaryInvalid, match=r"tools\[1\]\.args\.path"):
        _gate([{"name": "a", "verdict": "allow"}, {"name": "b", "verdict": "allow", "args": {"path": {"under": "rel"}}}])
