"""Gate benchmark: decision latency at 10, 100 and 1,000 rules, beside Cedar (``cedarpy``).

Not a test: it prints numbers and asserts nothing (except that the two engines agree, which it
reports as a count of disagreements). In one run, for each rule-set size:

* ``contain.gate.Gate.evaluate`` on calls without an input schema (the rules alone), and again with
  a small input schema (validation included; the validator is cached per schema, as in the gateway);
* Cedar deciding an equivalent policy set: each manifest rule becomes one policy (deny -> ``forbid``,
  allow -> ``permit``, review -> ``permit``; an Allow whose determining policies (Cedar's
  ``diagnostics.reasons``) include a review row counts as review). Name globs become ``context.tool like "..."``,
  exact names ``context.tool == "..."``, ``maximum`` a ``<=`` guarded by ``has``, ``enum`` a
  ``[...].contains(...)``. Policies and entities are pre-parsed once (``cedarpy.PolicySet`` /
  ``Entities``); only ``is_authorized`` is timed.

Every call is timed on its own with ``perf_counter_ns``; p50 and p99 are over those samples. Rule
sets are synthetic but shaped like manifests: 60 % exact names, 40 % globs (``svcK__read_*``),
a quarter with a numeric bound, some with an enum, verdicts mixed; call names are drawn so that
about a third hit an exact rule, a third a glob and a third no rule at all. A last row shows the
index's worst case: 1,000 globs with no literal prefix or suffix and tool names that never repeat.

Run: ``.venv/bin/python benchmarks/gate_bench.py [--calls 20000] [--cedar-calls 2000] [--seed 1]``
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import cedarpy

from contain.boundary import ToolRule, ToolVerdict
from contain.gate import Gate, ToolCall

SIZES = (10, 100, 1000)
MODES = ("fast", "safe")
SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer"}, "mode": {"type": "string"}},
    "required": ["amount", "mode"],
}


def make_rules(n: int, rng: random.Random) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(n):
        verdict = rng.choices(["allow", "review", "deny"], weights=[6, 3, 1])[0]
        name = f"svc{i % 37}__op{i}" if i % 5 < 3 else f"svc{i % 37}__read_{i}_*"
        args: dict[str, Any] = {}
        if i % 4 == 0:
            args["amount"] = {"maximum": rng.choice([100, 1000, 10000])}
        if i % 7 == 0:
            args["mode"] = {"enum": list(MODES)}
        rows.append({"name": name, "verdict": verdict, "args": args})
    return rows


def make_calls(rows: list[dict[str, Any]], count: int, rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for _ in range(count):
        row = rng.choice(rows)
        kind = rng.randrange(3)
        if kind == 0 or "*" not in row["name"]:
            tool = row["name"].replace("*", "x") if kind != 2 else f"unknown__tool{rng.randrange(10**6)}"
        else:
            tool = row["name"].replace("*", f"item{rng.randrange(1000)}")
        arguments = {"amount": rng.choice([5, 500, 5000, 50000]), "mode": rng.choice(["fast", "safe", "wild"])}
        calls.append((tool, arguments))
    return calls


def cedar_policies(rows: list[dict[str, Any]]) -> str:
    out = []
    for i, row in enumerate(rows):
        effect = "forbid" if row["verdict"] == "deny" else "permit"
        name = row["name"]
        conds = [f'context.tool like "{name}"' if "*" in name else f'context.tool == "{name}"']
        for arg, constraint in sorted(row["args"].items()):
            if "maximum" in constraint:
                conds.append(f"context.args has {arg} && context.args.{arg} <= {int(constraint['maximum'])}")
            if "enum" in constraint:
                values = ", ".join(json.dumps(v) for v in constraint["enum"])
                conds.append(f"context.args has {arg} && [{values}].contains(context.args.{arg})")
        body = " && ".join(f"({c})" for c in conds)
        out.append(f"{effect}(principal, action, resource) when {{ {body} }};  // {row['verdict']} tools[{i}]")
    return "\n".join(out)


def cedar_verdict(result: Any, rows: list[dict[str, Any]]) -> ToolVerdict:
    if result.decision != cedarpy.Decision.Allow:
        return ToolVerdict.DENY
    # cedarpy names policies policy0, policy1, ... in text order: map them back to the rows.
    fired = {rows[int(r.removeprefix("policy"))]["verdict"] for r in result.diagnostics.reasons}
    return ToolVerdict.REVIEW if "review" in fired else ToolVerdict.ALLOW


def percentiles(samples_ns: list[int]) -> tuple[float, float]:
    ordered = sorted(samples_ns)
    p50 = statistics.median(ordered) / 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1000
    return p50, p99


def time_each(fn: Callable[[Any], Any], inputs: list[Any]) -> tuple[list[int], list[Any]]:
    samples, outputs = [], []
    clock = time.perf_counter_ns
    for item in inputs:
        start = clock()
        out = fn(item)
        samples.append(clock() - start)
        outputs.append(out)
    return samples, outputs


def run(size: int, calls_n: int, cedar_n: int, rng: random.Random) -> None:
    rows = make_rules(size, rng)
    gate = Gate([ToolRule.model_validate(r) for r in rows])
    calls = make_calls(rows, calls_n, rng)
    plain = [ToolCall("alice", "", tool, "sha256:t", args) for tool, args in calls]
    schema = [ToolCall("alice", "", tool, "sha256:t", args, SCHEMA) for tool, args in calls]
    for warm in plain[:500] + schema[:500]:
        gate.evaluate(warm)
    gate_ns, gate_out = time_each(gate.evaluate, plain)
    schema_ns, _ = time_each(gate.evaluate, schema)

    policy_set = cedarpy.PolicySet.from_str(cedar_policies(rows))
    entities = cedarpy.Entities.from_json_str("[]")
    requests = [
        {
            "principal": 'User::"alice"',
            "action": 'Action::"call"',
            "resource": 'Tool::"t"',
            "context": {"tool": tool, "args": args},
        }
        for tool, args in calls[:cedar_n]
    ]
    for warm in requests[:50]:
        cedarpy.is_authorized(warm, policy_set, entities)
    cedar_ns, cedar_out = time_each(lambda r: cedarpy.is_authorized(r, policy_set, entities), requests)
    disagreements = sum(
        1 for mine, theirs in zip(gate_out, cedar_out, strict=False) if mine.verdict is not cedar_verdict(theirs, rows)
    )
    verdicts = {v.value: sum(1 for d in gate_out if d.verdict is v) for v in ToolVerdict}
    for label, samples in (("gate", gate_ns), ("gate+schema", schema_ns), ("cedar", cedar_ns)):
        p50, p99 = percentiles(samples)
        print(f"{size:>6} rules  {label:<12} n={len(samples):>6}  p50 {p50:9.1f} µs  p99 {p99:9.1f} µs")
    print(f"{'':>6}        verdicts {verdicts}; gate vs cedar disagreements: {disagreements}/{len(cedar_out)}")


def run_worst_case(calls_n: int, rng: random.Random) -> None:
    """1,000 globs with no literal prefix or suffix (``*__opN*``) and never-repeating tool names
    (every look-up misses the candidate cache): each call matches every glob's regex."""
    rows = [{"name": f"*__op{i}*", "verdict": "allow"} for i in range(1000)]
    gate = Gate([ToolRule.model_validate(r) for r in rows])
    names = [f"s{rng.randrange(10**9)}__op{rng.randrange(2000)}" for _ in range(calls_n)]
    calls = [ToolCall("alice", "", name, "t", {}) for name in names]
    samples, _ = time_each(gate.evaluate, calls)
    p50, p99 = percentiles(samples)
    print(f"{1000:>6} rules  {'worst case':<12} n={len(samples):>6}  p50 {p50:9.1f} µs  p99 {p99:9.1f} µs"
          "  (1,000 globs *__opN*, no name repeats)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=20000, help="calls timed per size for the gate")
    parser.add_argument("--cedar-calls", type=int, default=2000, help="calls timed per size for Cedar")
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    print(f"cedarpy {importlib.metadata.version('cedarpy')}; per-call latency, microseconds")
    for size in SIZES:
        run(size, opts.calls, opts.cedar_calls, rng)
    run_worst_case(min(opts.calls, 2000), rng)


if __name__ == "__main__":
    main()
