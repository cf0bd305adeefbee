"""The seccomp policy rendered for people: the Markdown table in docs/seccomp.md.

Pure: a function of ``SECCOMP_RULES`` (``runtime/seccomp_rules.py``); a unit test checks the docs
table equals what ``render_rules_markdown`` returns. Enforces nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from contain.runtime.seccomp_rules import SECCOMP_RULES, SyscallRule

__all__ = ["render_rules_markdown"]


_MAX_CONDITIONS_SHOWN = 12


def render_rules_markdown(rules: Sequence[SyscallRule] = SECCOMP_RULES) -> str:
    """The table as Markdown, a line per (syscall, action, why, probe); docs/seccomp.md has it."""
    groups: dict[tuple[str, str, str, str], list[SyscallRule]] = {}
    for rule in rules:
        key = (rule.syscall, rule.describe_action(), rule.why, rule.probe)
        groups.setdefault(key, []).append(rule)
    lines = ["| syscall | action | when | why | probe |", "|---|---|---|---|---|"]
    for (syscall, action, why, probe), members in groups.items():
        conds = [" and ".join(str(c) for c in r.when) or "always" for r in members]
        if len(conds) > _MAX_CONDITIONS_SHOWN:
            when = f"any of {len(conds)} tests, e.g. `{conds[0]}`"
        else:
            when = " or ".join(f"`{c}`" if c != "always" else c for c in conds)
        lines.append(f"| `{syscall}` | {action} | {when} | {why} | {probe} |")
    return "\n".join(lines) + "\n"
