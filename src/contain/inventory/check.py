"""``contain check``: lint a boundary manifest against its declared threats.

Steps, in order:

1. ``load_boundary`` validates the manifest (``BoundaryInvalid`` on any problem, exit 125).
2. ``gather_check_facts`` does the host I/O once: resolve every bind's host path, list the
   credential files and ``.env*`` files that would be visible inside it, and the hook runners of
   write-bound repositories (``core.hooksPath`` from ``.git/config`` and ``HOOK_RUNNERS``).
3. ``run_checks`` applies every ``CHECK_RULES`` row; pure.
4. Each finding gets the manifest line of its key path from the YAML node tree.

What this enforces: nothing — it reports. ``contain run`` enforces the boundary; the gate and
the broker enforce tool and record rules. What it does not see: anything the ``Boundary`` cannot
express yet (see ``check_rules``), files deeper than the top of a bind (``.env*`` is looked for
at the top only; credential files are found through the home directory).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from contain.boundary import Boundary, FileAccess, load_boundary
from contain.boundary.load import _line_of
from contain.inventory.check_rules import (
    CHECK_RULES,
    HOOK_RUNNERS,
    BindFacts,
    CheckFacts,
    CheckRule,
    Severity,
)
from contain.inventory.credentials import CREDENTIAL_FILES
from contain.visible_text import for_terminal

__all__ = [
    "CheckReport",
    "Finding",
    "check_manifest",
    "gather_check_facts",
    "render_check_text",
    "report_to_json",
    "run_checks",
]


@dataclass(frozen=True)
class Finding:
    """One rule firing at one key path of the manifest."""

    rule_id: str
    severity: Severity
    title: str
    key_path: str
    message: str
    fix: str
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able mapping."""
        return {
            "rule_id": self.rule_id,
            "severity": self.severity.value,
            "title": self.title,
            "key_path": self.key_path,
            "message": self.message,
            "fix": self.fix,
            "line": self.line,
        }


@dataclass(frozen=True)
class CheckReport:
    """All findings for one manifest."""

    manifest: str
    findings: tuple[Finding, ...]

    @property
    def has_errors(self) -> bool:
        """True when any finding is an error (``contain check`` exits 1)."""
        return any(f.severity is Severity.ERROR for f in self.findings)


def gather_check_facts(boundary: Boundary, *, home: Path, broker_config: str | None = None) -> CheckFacts:
    """Resolve bind paths and look for credential files and hook runners inside them (I/O).

    Args:
        boundary: the validated manifest (host paths already absolute).
        home: the user's home directory; it is resolved here.
        broker_config: a broker.yaml whose actions the records are checked against (imports the
            action modules it names, as the broker itself would).
    """
    real_home = Path(os.path.realpath(home))
    credential_files = [real_home / row.path for row in CREDENTIAL_FILES] + [real_home / ".ssh"]
    existing = [Path(os.path.realpath(p)) for p in credential_files if p.exists()]
    binds: list[BindFacts] = []
    for index, rule in enumerate(boundary.files):
        if rule.access not in (FileAccess.READ, FileAccess.WRITE) or rule.host is None:
            continue
        resolved = Path(os.path.realpath(rule.host))
        inside = [p.relative_to(resolved).as_posix() for p in existing if p == resolved or resolved in p.parents]
        inside += _top_level_dotenvs(resolved)
        hooks = _hook_paths(resolved) if rule.access is FileAccess.WRITE else ()
        binds.append(BindFacts(index, resolved, tuple(hooks), tuple(sorted(set(inside)))))
    return CheckFacts(home=real_home, binds=tuple(binds), broker_actions=_broker_actions(broker_config))


def _broker_actions(broker_config: str | None) -> dict[str, bool] | None:
    """Action name -> whether it has a business rule, from the broker's own configuration."""
    if broker_config is None:
        return None
    from contain.broker.config import load_actions, load_config

    actions = load_actions(load_config(broker_config))
    return {name: action.validate is not None for name, action in actions.items()}


def run_checks(
    boundary: Boundary,
    facts: CheckFacts,
    *,
    rules: Sequence[CheckRule] = CHECK_RULES,
    node: yaml.Node | None = None,
) -> tuple[Finding, ...]:
    """Apply every rule; pure.

    Args:
        boundary: the manifest.
        facts: from ``gather_check_facts`` (or constructed in tests).
        rules: the rule table (default ``CHECK_RULES``).
        node: the manifest's YAML node tree, to put a line on each finding.

    Returns:
        Findings in table order, then key-path order.
    """
    findings: list[Finding] = []
    for rule in rules:
        for hit in rule.check(boundary, facts):
            findings.append(
                Finding(
                    rule.id,
                    rule.severity,
                    rule.title,
                    ".".join(str(part) for part in hit.key_path) or "(top level)",
                    f"{hit.message}: {rule.why}",
                    rule.fix,
                    _line_of(node, hit.key_path) if node is not None else None,
                )
            )
    return tuple(findings)


def check_manifest(path: str | os.PathLike[str], *, home: Path, broker_config: str | None = None) -> CheckReport:
    """Load, gather facts for, and lint one manifest file.

    Raises:
        BoundaryInvalid: the manifest cannot be read or is not a valid boundary.
    """
    boundary = load_boundary(path)
    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        node = None  # load_boundary just read it; lines are a nicety, the findings are not
    facts = gather_check_facts(boundary, home=home, broker_config=broker_config)
    return CheckReport(str(path), run_checks(boundary, facts, node=node))


def render_check_text(report: CheckReport) -> str:
    """Human-readable findings, one block per finding, and a summary line.

    Every field passes through ``contain.visible_text.for_terminal``: a manifest path or name with
    ESC, bidi or newline characters shows as escapes and cannot fake or hide a finding.
    """
    lines: list[str] = []
    shown = for_terminal  # messages quote manifest values (paths, names): one line each, controls escaped
    manifest = shown(report.manifest)
    for f in report.findings:
        where = f"{manifest}:{f.line}" if f.line else manifest
        lines.append(f"{where}: {f.severity.value} {f.rule_id} {shown(f.title)} [{shown(f.key_path)}]")
        lines.append(f"    {shown(f.message)}")
        lines.append(f"    fix: {shown(f.fix)}")
    counts = {s: sum(1 for f in report.findings if f.severity is s) for s in Severity}
    lines.append(
        f"{manifest}: {counts[Severity.ERROR]} error(s), "
        f"{counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} info"
    )
    return "\n".join(lines) + "\n"


def report_to_json(report: CheckReport) -> dict[str, Any]:
    """The report as a JSON-able mapping."""
    return {
        "manifest": report.manifest,
        "has_errors": report.has_errors,
        "findings": [f.to_json() for f in report.findings],
    }


def _top_level_dotenvs(directory: Path) -> list[str]:
    try:
        names = [p.name for p in directory.iterdir()]
    except OSError:
        return []
    return [n for n in names if n == ".env" or n.startswith(".env.")]


_HOOKS_PATH = re.compile(r"^\s*hookspath\s*=\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def _hook_paths(work_tree: Path) -> list[str]:
    if not (work_tree / ".git").is_dir():
        return []
    found = [row.path for row in HOOK_RUNNERS if (work_tree / row.path).exists()]
    try:
        config = (work_tree / ".git" / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        config = ""
    for match in _HOOKS_PATH.finditer(config):
        value = match.group(1).strip('"')
        target = Path(os.path.normpath(work_tree / os.path.expanduser(value)))
        if target == work_tree or work_tree in target.parents:
            # missing or not, it is writable: a missing hooks directory can be created
            found.append(target.relative_to(work_tree).as_posix() if target != work_tree else ".")
    return sorted(set(found))
