"""Argument constraints: each predicate's holds / fails / undecidable answers."""

import pytest

from contain.boundary import ArgConstraint, ToolRule
from contain.gate.rules import Outcome, check_constraint, compile_rule, glob_prefix, is_path_under

H, F, U = Outcome.HOLDS, Outcome.FAILS, Outcome.UNDECIDABLE


def _check(value, **constraint):
    return check_constraint(ArgConstraint.model_validate(constraint), value).outcome


@pytest.mark.parametrize(
    ("constraint", "value", "expected"),
    [
        ({"type": "integer"}, 3, H),
        ({"type": "integer"}, 3.0, H),
        ({"type": "integer"}, 3.5, F),
        ({"type": "integer"}, True, F),
        ({"type": "number"}, 2.5, H),
        ({"type": "number"}, "2", F),
        ({"type": "string"}, "s", H),
        ({"type": "boolean"}, 0, F),
        ({"type": "array"}, [], H),
        ({"type": "object"}, {}, H),
        ({"minimum": 1, "maximum": 10}, 1, H),
        ({"minimum": 1, "maximum": 10}, 10.0, H),
        ({"minimum": 1, "maximum": 10}, 0, F),
        ({"minimum": 1, "maximum": 10}, 11, F),
        ({"maximum": 10}, "5", U),
        ({"maximum": 10}, True, U),
        ({"enum": ["a", 1]}, "a", H),
        ({"enum": ["a", 1]}, 1.0, H),
        ({"enum": ["a", 1]}, True, F),
        ({"enum": ["a", 1]}, "b", F),
        ({"pattern": "[a-z]+"}, "abc", H),
        ({"pattern": "[a-z]+"}, "abc1", F),
        ({"pattern": "[a-z]+"}, 5, U),
        ({"max_length": 3}, "abc", H),
        ({"max_length": 3}, "abcd", F),
        ({"max_length": 3}, [1, 2, 3, 4], F),
        ({"max_length": 3}, 12345, U),
        ({"hosts": ["api.example.com", "*.example.org"]}, "https://api.example.com/v1", H),
        ({"hosts": ["api.example.com", "*.example.org"]}, "API.Example.COM.", H),
        ({"hosts": ["api.example.com", "*.example.org"]}, "https://a.b.example.org:8443/x", H),
        ({"hosts": ["api.example.com", "*.example.org"]}, "https://example.org/", F),
        ({"hosts": ["api.example.com", "*.example.org"]}, "https://evil.com/api.example.com", F),
        ({"hosts": ["api.example.com", "*.example.org"]}, "https://api.example.com@evil.com/", U),
        ({"hosts": ["api.example.com", "*.example.org"]}, "https://api.example.com\\@evil.com/", U),
        ({"hosts": ["api.example.com", "*.example.org"]}, "http://127.0.0.1/", U),
        ({"hosts": ["api.example.com", "*.example.org"]}, "http://api.example.com:99999/", U),
        ({"hosts": ["api.example.com", "*.example.org"]}, "api.example.com\x00.evil", U),
        ({"hosts": ["api.example.com"]}, 3, U),
    ],
)
def test_constraint_outcomes(constraint, value, expected):
    assert _check(value, **constraint) is expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/data", H),
        ("/data/", H),
        ("/data/a/b.txt", H),
        ("/data/./a//b", H),
        ("//data/a", H),
        ("/database", F),
        ("/etc/passwd", F),
        ("/", F),
        ("/data/../etc/passwd", U),
        ("/data/a/..", U),
        ("data/a", U),
        ("", U),
        ("/data/a\x00b", U),
    ],
)
def test_under_is_lexical_and_refuses_dotdot_nul_and_relative_paths(path, expected):
    assert is_path_under(path, "/data").outcome is expected


def test_under_reason_names_the_root():
    result = is_path_under("/etc/x", "/data/")
    assert result.reason == "'/etc/x' is not under /data"


def test_under_on_a_non_string_is_undecidable():
    assert _check(["/data"], under="/data") is U


def test_glob_prefix():
    assert glob_prefix("fs__read_*") == "fs__read_"
    assert glob_prefix("*") == ""
    assert glob_prefix("exact.name") == "exact.name"


def test_name_glob_star_spans_dots_and_underscores_and_is_case_sensitive():
    rule = compile_rule(ToolRule(name="billing.*_invoice", verdict="allow"), index=4)
    assert rule.rule_id == "tools[4]"
    assert rule.matches_name("billing.update_invoice")
    assert rule.matches_name("billing.a.b_invoice")
    assert not rule.matches_name("Billing.update_invoice")
    assert not rule.matches_name("billing.update_invoice2")
    assert compile_rule(ToolRule(name="a.b", verdict="allow"), index=0).matches_name("a.b")
    assert not compile_rule(ToolRule(name="a.b", verdict="allow"), index=0).matches_name("aXb")


def test_admits_names_the_missing_argument():
    rule = compile_rule(ToolRule.model_validate({"name": "t", "verdict": "allow", "args": {"n": {"maximum": 1}}}), index=0)
    assert rule.admits({}) == (False, "argument 'n' is missing")
    assert rule.admits({"n": 1}) == (True, "")


@pytest.mark.parametrize("root", ["data", "/data/../etc", "/da\x00ta"])
def test_unusable_under_roots_are_refused_when_the_gate_is_built(root):
    rule = ToolRule.model_validate({"name": "t", "verdict": "allow", "args": {"p": {"under": root}}})
    with pytest.raises(ValueError, match=r"tools\[3\]\.args\.p"):
        compile_rule(rule, index=3)


def test_invalid_host_patterns_are_refused_when_the_gate_is_built():
    rule = ToolRule.model_validate({"name": "t", "verdict": "allow", "args": {"u": {"hosts": ["*.com"]}}})
    with pytest.raises(ValueError):
        compile_rule(rule, index=0)


def test_reasons_quote_at_most_a_short_excerpt_of_the_value():
    result = check_constraint(ArgConstraint(pattern="[a-z]+"), "A" * 10_000)
    assert result.outcome is F and len(result.reason) < 150
