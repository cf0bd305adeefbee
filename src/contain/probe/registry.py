"""Which cases exist: collected from every ``contain.probe.cases_*`` module, checked against the
catalogue.

Every ``cases_*.py`` module in this package exports ``CASES: tuple[ProbeCase, ...]``. The registry
imports each one, refuses duplicate ids and ids the catalogue does not list, and orders cases as
the catalogue does. ``CATALOGUE_IDS`` mirrors the case ids of ESCAPE_CATALOG.md (the shared
specification); a unit test compares the two whenever the catalogue file is present, so a new
catalogue row without a probe fails the suite. A catalogue id that no module implements is not
skipped: the runner reports it as ERROR ("not implemented").
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
import re
from collections.abc import Iterable, Sequence

from contain.probe.case import Category, ProbeCase

__all__ = [
    "ALL_IDS",
    "CATALOGUE_IDS",
    "PROJECT_IDS",
    "case_modules",
    "load_cases",
    "missing_ids",
    "parse_catalogue_ids",
    "select_ids",
]

CATALOGUE_IDS: tuple[str, ...] = (
    *(f"FS-{n:02d}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 14, 15, 16, 17)),
    *(f"PR-{n:02d}" for n in (1, 2, 3, 5, 6)),
    *(f"FD-{n:02d}" for n in (1, 3, 4)),
    *(f"SY-{n:02d}" for n in (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12)),
    *(f"IP-{n:02d}" for n in (1, 2, 3, 4, 5, 7, 8)),
    *(f"NE-{n:02d}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 10)),
    *(f"PX-{n:02d}" for n in (1, 2, 3, 4, 5, 7, 8, 11, 12, 13, 14, 15)),
    *(f"RE-{n:02d}" for n in range(1, 12)),
    *(f"LF-{n:02d}" for n in (1, 2, 3, 5, 6, 7, 8, 9)),
    *(f"XT-{n:02d}" for n in (1, 2, 3, 4, 6, 7)),
    *(f"CR-{n:02d}" for n in (1, 2, 3, 4, 5)),
    *(f"OC-{n:02d}" for n in range(1, 7)),
    *(f"VM-{n:02d}" for n in range(1, 7)),
)

# Cases contain adds beyond the public catalogue: regressions of findings (red-team passes, issue
# reports) that the catalogue has no row for. Numbered from 51 within their category so that they
# never collide with a catalogue id, present or future. Each is documented in docs/probe.md.
PROJECT_IDS: tuple[str, ...] = ("FS-51", "FS-52", "FS-53", "IP-51", "RE-51", "RE-52", "RE-53", "RE-54")

# Every id the battery runs, in order: the catalogue's, then the project's.
ALL_IDS: tuple[str, ...] = CATALOGUE_IDS + PROJECT_IDS

_ID = re.compile(r"^([A-Z]{2})-(\d{2})$")
_ROW = re.compile(r"^\|\s*([A-Z]{2}-\d{2})\s*\|", re.MULTILINE)
_ORDER = {cat.value: i for i, cat in enumerate(Category)}
_PACKAGE = "contain.probe"


def parse_catalogue_ids(text: str) -> tuple[str, ...]:
    """The case ids of a catalogue in ESCAPE_CATALOG.md's table format, in order."""
    return tuple(_ROW.findall(text))


def case_modules() -> tuple[str, ...]:
    """Names of the ``contain.probe.cases_*`` modules present in this installation."""
    package = importlib.import_module(_PACKAGE)
    return tuple(
        sorted(f"{_PACKAGE}.{m.name}" for m in pkgutil.iter_modules(package.__path__) if m.name.startswith("cases_"))
    )


def _sort_key(case_id: str) -> tuple[int, int]:
    match = _ID.match(case_id)
    assert match is not None
    return _ORDER.get(match.group(1), len(_ORDER)), int(match.group(2))


def check_cases(cases: Iterable[ProbeCase], *, catalogue: Sequence[str] = ALL_IDS) -> tuple[ProbeCase, ...]:
    """Validate and order cases.

    Raises:
        ValueError: an id is malformed, duplicated, not in the catalogue, or its prefix does not
            match its category.
    """
    seen: dict[str, ProbeCase] = {}
    known = set(catalogue)
    for case in cases:
        match = _ID.match(case.id)
        if match is None:
            raise ValueError(f"case id {case.id!r} is malformed; write it as in the catalogue, e.g. FS-01")
        if case.id in seen:
            raise ValueError(f"case id {case.id} is defined twice; each catalogue case has one probe")
        if case.id not in known:
            raise ValueError(
                f"case id {case.id} is neither in the escape catalogue nor in PROJECT_IDS; add it to one first"
            )
        if match.group(1) != case.category.value:
            raise ValueError(f"case {case.id} has category {case.category.value}; the id prefix must match")
        seen[case.id] = case
    return tuple(sorted(seen.values(), key=lambda c: _sort_key(c.id)))


def load_cases(modules: Sequence[str] | None = None) -> tuple[ProbeCase, ...]:
    """Import the case modules and return every case, checked and in catalogue order.

    Raises:
        ValueError: see ``check_cases``; or a module has no ``CASES`` tuple.
    """
    collected: list[ProbeCase] = []
    for name in modules if modules is not None else case_modules():
        module = importlib.import_module(name)
        cases = getattr(module, "CASES", None)
        if not isinstance(cases, tuple):
            raise ValueError(f"{name} must define CASES: tuple[ProbeCase, ...]")
        collected.extend(cases)
    return check_cases(collected)


def missing_ids(cases: Iterable[ProbeCase], *, catalogue: Sequence[str] = ALL_IDS) -> tuple[str, ...]:
    """Catalogue ids that no case implements."""
    have = {c.id for c in cases}
    return tuple(i for i in catalogue if i not in have)


def select_ids(ids: Iterable[str], patterns: str | None) -> tuple[str, ...]:
    """Ids matching a comma-separated glob list such as ``'FS-*,NE-01'`` (all when empty).

    Raises:
        ValueError: a pattern matches no id (a typo must not silently run nothing).
    """
    ids = tuple(ids)
    if not patterns:
        return ids
    wanted = [p.strip().upper() for p in patterns.split(",") if p.strip()]
    for pattern in wanted:
        if not any(fnmatch.fnmatchcase(i, pattern) for i in ids):
            raise ValueError(f"--cases pattern {pattern!r} matches no case; ids look like FS-01 or FS-*")
    return tuple(i for i in ids if any(fnmatch.fnmatchcase(i, p) for p in wanted))
