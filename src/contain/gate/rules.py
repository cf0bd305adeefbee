"""Rule matching for the gate: tool-name globs and argument constraints, as pure functions.

What a rule is: a row of the manifest's ``tools:`` section (``contain.boundary.ToolRule``): a name
glob, a verdict and constraints per top-level argument. A rule *applies* to a call when its glob
matches the tool name and its constraints admit the arguments. How constraints admit depends on the
verdict, because both directions must fail closed:

* Each constraint evaluates to HOLDS, FAILS or UNDECIDABLE. UNDECIDABLE means the value cannot be
  judged by that constraint: ``minimum`` on a string, ``under`` on a path containing NUL or a ``..``
  component, ``hosts`` on a URL with userinfo or an IP literal.
* An ``allow`` or ``review`` rule applies only when every constraint HOLDS.
* A ``deny`` rule applies when no constraint FAILS: an undecidable value is treated as inside the
  region the deny rule describes. So ``deny amount minimum 1000`` also denies ``amount: "5000"``.
* A constraint naming an argument that is absent FAILS (for every verdict): the value it talks
  about does not exist, and the tool's input schema, checked before any rule, decides whether an
  argument may be absent.

Predicates (beyond the JSON-Schema fragments ``type``, ``minimum``, ``maximum``, ``enum``,
``pattern`` (whole string, ``re.fullmatch``), ``max_length`` (strings and arrays)):

* ``under``: the value must be an absolute POSIX path, without NUL and without any ``..``
  component, and after ``posixpath.normpath`` (and collapsing a leading ``//``) equal the root or
  lie below it. ``..`` is refused rather than folded, because folding is only right when no
  component is a symlink. What is NOT checked: symlinks. The gate sees strings, not the
  filesystem the tool will open, so ``/data/link -> /etc`` passes; the place the path is opened
  (the sandbox's mount plan, Landlock, an MCP filesystem server's own root check) must refuse to
  follow it. Relative paths are undecidable (relative to what?).
* ``hosts``: the value is a URL (anything containing ``://``; userinfo refused) or a bare hostname;
  its host is canonicalised with ``contain.boundary.hostnames.canonical_hostname`` (lower case,
  IDNA, no final dot; IP literals and odd spellings refused) and compared with the list, whose
  entries are exact names or ``*.domain`` (proper subdomains only), canonicalised the same way.

Name globs: ``*`` matches any run of characters, including ``.`` and ``_``; every other
character is literal. Matching is case-sensitive. Regular-expression patterns come from the
manifest (trusted); values come from the agent, so a pathological manifest pattern can make
matching slow (Python's ``re`` backtracks): keep patterns simple.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

from contain.boundary import ArgConstraint, ToolRule, ToolVerdict
from contain.boundary.hostnames import HostnameError, canonical_hostname, canonical_pattern
from contain.gate.digests import canonical_json

__all__ = [
    "CompiledRule",
    "ConstraintResult",
    "Outcome",
    "check_constraint",
    "compile_rule",
    "glob_prefix",
    "glob_suffix",
    "is_path_under",
]


class Outcome(Enum):
    """The three answers a constraint can give about one value."""

    HOLDS = "holds"
    FAILS = "fails"
    UNDECIDABLE = "undecidable"


@dataclass(frozen=True)
class ConstraintResult:
    """One constraint's answer, with a sentence saying why when it does not hold."""

    outcome: Outcome
    reason: str = ""


_OK = ConstraintResult(Outcome.HOLDS)
_MISSING = object()


_SHOWN_CHARS = 80  # how much of an agent's value a reason quotes; reasons go into logs and replies


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _fails(reason: str) -> ConstraintResult:
    return ConstraintResult(Outcome.FAILS, reason)


def _undecidable(reason: str) -> ConstraintResult:
    return ConstraintResult(Outcome.UNDECIDABLE, reason)


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _type_holds(kind: str, value: Any) -> bool:
    if kind == "integer":
        return type(value) is int or (type(value) is float and value.is_integer())
    if kind == "number":
        return _is_number(value)
    expected: dict[str, type] = {
        "string": str,
        "boolean": bool,
        "array": list,
        "object": dict,
    }
    return type(value) is expected[kind]


def _same_json(a: Any, b: Any) -> bool:
    try:
        return canonical_json(a) == canonical_json(b)
    except ValueError:
        return False


def _normalise_absolute(path: str) -> str:
    normal = posixpath.normpath(path)
    # POSIX lets normpath keep exactly two leading slashes; the kernel treats them as one.
    return "/" + normal.lstrip("/")


def is_path_under(path: str, root: str) -> ConstraintResult:
    """Decide lexically whether ``path`` is ``root`` or below it (symlinks are not resolved).

    Args:
        path: the argument value, an absolute POSIX path.
        root: the manifest's root, an absolute POSIX path.

    Returns:
        HOLDS inside, FAILS outside, UNDECIDABLE for NUL, ``..``, or a relative path.
    """
    if "\x00" in path:
        return _undecidable("contains a NUL byte")
    if not path.startswith("/"):
        return _undecidable(f"{_show(path)} is not an absolute path")
    if ".." in path.split("/"):
        return _undecidable(f"{_show(path)} has a '..' component; name the path without it")
    normal = _normalise_absolute(path)
    base = _normalise_absolute(root)
    if normal == base or normal.startswith(base.rstrip("/") + "/"):
        return _OK
    return _fails(f"{_show(path)} is not under {base}")


def _host_of(value: str) -> str:
    """Return the canonical host of a URL or hostname, raising HostnameError when unusable."""
    if "://" in value:
        parts = urlsplit(value)
        if "@" in parts.netloc:
            raise HostnameError(f"{value!r} carries userinfo before the host")
        host = parts.hostname
        if not host:
            raise HostnameError(f"{value!r} has no host")
        try:
            _ = parts.port  # a malformed port means the URL means different things to different parsers
        except ValueError as exc:
            raise HostnameError(f"{value!r} has an invalid port") from exc
        return canonical_hostname(host)
    return canonical_hostname(value)


def _host_in(host: str, patterns: tuple[str, ...]) -> bool:
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]):
                return True
        elif host == pattern:
            return True
    return False


def check_constraint(
    constraint: ArgConstraint,
    value: Any,
    *,
    compiled_pattern: re.Pattern[str] | None = None,
    host_patterns: tuple[str, ...] | None = None,
) -> ConstraintResult:
    """Evaluate every part of one argument constraint on one value; the first non-HOLDS wins.

    Args:
        constraint: the manifest's constraint.
        value: the argument's value (JSON).
        compiled_pattern: ``constraint.pattern`` compiled (recompiled here when not given).
        host_patterns: ``constraint.hosts`` canonicalised (recomputed here when not given).

    Returns:
        A ConstraintResult; its reason is a fragment such as "is 5000, above the maximum 1000".
    """
    if constraint.type is not None and not _type_holds(constraint.type, value):
        return _fails(f"is a {_json_type(value)}, not a {constraint.type}")
    for bound, above in ((constraint.minimum, False), (constraint.maximum, True)):
        if bound is None:
            continue
        if not _is_number(value):
            return _undecidable(f"is a {_json_type(value)}, so it cannot be compared with {bound:g}")
        if (value > bound) if above else (value < bound):
            side = "above the maximum" if above else "below the minimum"
            return _fails(f"is {_show(value)}, {side} {bound:g}")
    if constraint.enum is not None and not any(_same_json(value, item) for item in constraint.enum):
        allowed = ", ".join(repr(item) for item in constraint.enum)
        return _fails(f"is {_show(value)}, not one of {allowed}")
    if constraint.max_length is not None:
        if type(value) not in (str, list):
            return _undecidable(f"is a {_json_type(value)}, which has no length")
        if len(value) > constraint.max_length:
            return _fails(f"has length {len(value)}, above the maximum {constraint.max_length}")
    if constraint.pattern is not None:
        if type(value) is not str:
            return _undecidable(f"is a {_json_type(value)}, not a string to match /{constraint.pattern}/")
        regex = compiled_pattern or re.compile(constraint.pattern)
        if regex.fullmatch(value) is None:
            return _fails(f"{_show(value)} does not match /{constraint.pattern}/")
    if constraint.under is not None:
        if type(value) is not str:
            return _undecidable(f"is a {_json_type(value)}, not a path")
        result = is_path_under(value, constraint.under)
        if result.outcome is not Outcome.HOLDS:
            return result
    if constraint.hosts is not None:
        return _check_hosts(constraint.hosts, value, host_patterns)
    return _OK


def _check_hosts(hosts: tuple[str, ...], value: Any, patterns: tuple[str, ...] | None) -> ConstraintResult:
    if type(value) is not str:
        return _undecidable(f"is a {_json_type(value)}, not a URL or hostname")
    try:
        host = _host_of(value)
    except HostnameError as exc:
        detail = str(exc) if len(str(exc)) <= _SHOWN_CHARS else str(exc)[: _SHOWN_CHARS - 3] + "..."
        return _undecidable(f"names no usable host: {detail}")
    if _host_in(host, patterns if patterns is not None else _canonical_hosts(hosts)):
        return _OK
    return _fails(f"names host {host}, which is not one of {', '.join(hosts)}")


def _canonical_hosts(hosts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(canonical_pattern(h) for h in hosts)


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def glob_prefix(pattern: str) -> str:
    """The literal text before the first ``*`` (the whole name when there is none)."""
    star = pattern.find("*")
    return pattern if star < 0 else pattern[:star]


def glob_suffix(pattern: str) -> str:
    """The literal text after the last ``*`` (the whole name when there is none)."""
    star = pattern.rfind("*")
    return pattern if star < 0 else pattern[star + 1 :]


def _glob_matcher(pattern: str) -> Callable[[str], bool]:
    if "*" not in pattern:
        return pattern.__eq__
    regex = re.compile("".join(".*" if part == "*" else re.escape(part) for part in re.split(r"(\*)", pattern)))
    return lambda name: regex.fullmatch(name) is not None


@dataclass(frozen=True)
class _CompiledConstraint:
    argument: str
    constraint: ArgConstraint
    pattern: re.Pattern[str] | None
    hosts: tuple[str, ...] | None


@dataclass(frozen=True)
class CompiledRule:
    """A ToolRule with its glob and patterns compiled, its position and id."""

    index: int
    rule_id: str
    rule: ToolRule
    matches_name: Callable[[str], bool]
    constraints: tuple[_CompiledConstraint, ...]

    @property
    def verdict(self) -> ToolVerdict:
        """The rule's verdict."""
        return self.rule.verdict

    def admits(self, arguments: Mapping[str, Any]) -> tuple[bool, str]:
        """Whether this rule applies to ``arguments`` (its name already matched), and why not.

        Returns:
            ``(True, "")`` when it applies; ``(False, sentence)`` naming the first constraint that
            keeps it from applying.
        """
        deny = self.rule.verdict is ToolVerdict.DENY
        for item in self.constraints:
            value = arguments.get(item.argument, _MISSING)
            if value is _MISSING:
                return False, f"argument {item.argument!r} is missing"
            result = check_constraint(
                item.constraint, value, compiled_pattern=item.pattern, host_patterns=item.hosts
            )
            if result.outcome is Outcome.FAILS or (result.outcome is Outcome.UNDECIDABLE and not deny):
                return False, f"argument {item.argument!r} {result.reason}"
        return True, ""


def _check_root(root: str, *, where: str) -> None:
    if not root.startswith("/") or "\x00" in root or ".." in root.split("/"):
        raise ValueError(f"{where}: under {root!r} must be an absolute path without '..' or NUL")


def compile_rule(rule: ToolRule, *, index: int) -> CompiledRule:
    """Compile one manifest rule; its id is ``tools[index]``, the manifest position.

    Raises:
        ValueError: for an ``under`` root that is not absolute (or has ``..``/NUL) and for a
            ``hosts`` entry that is not a valid hostname or ``*.domain`` pattern.
    """
    for name, constraint in rule.args.items():
        if constraint.under is not None:
            _check_root(constraint.under, where=f"tools[{index}].args.{name}")
    constraints = tuple(
        _CompiledConstraint(
            argument=name,
            constraint=constraint,
            pattern=re.compile(constraint.pattern) if constraint.pattern is not None else None,
            hosts=_canonical_hosts(constraint.hosts) if constraint.hosts is not None else None,
        )
        for name, constraint in sorted(rule.args.items())
    )
    return CompiledRule(
        index=index,
        rule_id=f"tools[{index}]",
        rule=rule,
        matches_name=_glob_matcher(rule.name),
        constraints=constraints,
    )
