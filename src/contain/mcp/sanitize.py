"""Clean model-visible text before an agent reads it: invisible and terminal-control characters.

A tool description (and every string inside a tool's input schema: property descriptions, titles,
enum values, defaults, at any depth) is text an upstream server wrote and a model will read as
instructions. Some
characters render as nothing (or reorder what a human reviewer sees) while a model still reads
them, which is how "tool poisoning" hides instructions in plain sight. Each row of
``STRIPPED_RANGES`` is one range of such characters with the reason it is removed; ANSI escape
sequences (which rewrite what a terminal shows) are removed as whole sequences.

Enforced: every character in the table and every ANSI CSI/OSC/two-byte escape is removed from
descriptions the gateway exposes, and each removal is reported (count per row) so it is logged.
``sanitize_json`` applies the same to every string value of a JSON tree and reports every object
key that would change: keys are names (a renamed property would change what arguments mean), so
the caller refuses such a definition instead of renaming (``contain.mcp.exposure``).

Not enforced: meaning. A description in plain, visible words that tells the model to do something
harmful passes unchanged; pinning (``contain.mcp.pins``) makes sure a reviewer saw those words and
that they cannot change silently. Homoglyphs (Cyrillic "а" for Latin "a") are not folded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANSI_ESCAPE",
    "STRIPPED_RANGES",
    "SanitizeReport",
    "SanitizedJson",
    "StrippedRange",
    "sanitize_json",
    "sanitize_text",
]


@dataclass(frozen=True)
class StrippedRange:
    """One range of code points removed from descriptions, with the reason."""

    rule_id: str
    first: int
    last: int
    reason: str


STRIPPED_RANGES: tuple[StrippedRange, ...] = (
    StrippedRange("c0-controls", 0x0000, 0x0008, "C0 controls render as nothing but reach the model"),
    StrippedRange("c0-controls-2", 0x000B, 0x001F, "C0 controls (except tab, newline) incl. ESC left over"),
    StrippedRange("del-c1-controls", 0x007F, 0x009F, "DEL and C1 controls; 0x9B is a one-byte CSI"),
    StrippedRange("soft-hyphen", 0x00AD, 0x00AD, "invisible unless at a line break; splits words"),
    StrippedRange("combining-grapheme-joiner", 0x034F, 0x034F, "invisible joiner"),
    StrippedRange("arabic-letter-mark", 0x061C, 0x061C, "bidi control: reorders what a reviewer sees"),
    StrippedRange("hangul-fillers", 0x115F, 0x1160, "render as blank space in many fonts"),
    StrippedRange("mongolian-vs", 0x180B, 0x180F, "variation selectors and vowel separator: invisible"),
    StrippedRange("zero-width", 0x200B, 0x200F, "zero-width space/joiners and LRM/RLM marks: invisible"),
    StrippedRange("bidi-embedding", 0x202A, 0x202E, "bidi embeddings/overrides (Trojan Source, CVE-2021-42574)"),
    StrippedRange("invisible-operators", 0x2060, 0x2064, "word joiner and invisible math operators"),
    StrippedRange("bidi-isolates", 0x2066, 0x2069, "bidi isolates (Trojan Source, CVE-2021-42574)"),
    StrippedRange("deprecated-format", 0x206A, 0x206F, "deprecated format controls: invisible"),
    StrippedRange("hangul-filler", 0x3164, 0x3164, "renders as blank space"),
    StrippedRange("variation-selectors", 0xFE00, 0xFE0F, "variation selectors can carry hidden bytes"),
    StrippedRange("bom", 0xFEFF, 0xFEFF, "zero-width no-break space (BOM)"),
    StrippedRange("halfwidth-filler", 0xFFA0, 0xFFA0, "renders as blank space"),
    StrippedRange("interlinear-annotation", 0xFFF9, 0xFFFB, "interlinear annotation controls: hidden text"),
    StrippedRange("shorthand-format", 0x1BCA0, 0x1BCA3, "shorthand format controls: invisible"),
    StrippedRange("musical-format", 0x1D173, 0x1D17A, "musical format controls: invisible"),
    StrippedRange("tag-characters", 0xE0000, 0xE007F, "tags spell hidden ASCII a model reads (ASCII smuggling)"),
    StrippedRange("variation-selectors-supplement", 0xE0100, 0xE01EF, "variation selectors can carry hidden bytes"),
)

# ECMA-48: CSI (ESC [ params final), OSC (ESC ] ... BEL or ST), other two-byte escapes (ESC Fe).
ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")

_RANGE_CLASS = re.compile(
    "[" + "".join(f"{re.escape(chr(r.first))}-{re.escape(chr(r.last))}" for r in STRIPPED_RANGES) + "]"
)


@dataclass(frozen=True)
class SanitizeReport:
    """The cleaned text and what was removed: rule id -> number of characters (or sequences)."""

    text: str
    removed: dict[str, int]

    @property
    def changed(self) -> bool:
        return bool(self.removed)


def _rule_for(code_point: int) -> str:
    for row in STRIPPED_RANGES:
        if row.first <= code_point <= row.last:
            return row.rule_id
    raise AssertionError(f"U+{code_point:04X} matched the class but no row")  # the class is built from the rows


def sanitize_text(text: str) -> SanitizeReport:
    """Remove ANSI escape sequences, then every character in ``STRIPPED_RANGES``.

    Args:
        text: a description as the upstream sent it.

    Returns:
        The cleaned text and a count of removals per rule id (``"ansi-escape"`` for sequences).
    """
    if text.isascii() and text.isprintable():
        return SanitizeReport(text, {})  # fast path: no ESC, no control, nothing outside ASCII
    removed: dict[str, int] = {}
    sequences = len(ANSI_ESCAPE.findall(text))
    if sequences:
        removed["ansi-escape"] = sequences
        text = ANSI_ESCAPE.sub("", text)
    for match in _RANGE_CLASS.finditer(text):
        rule = _rule_for(ord(match.group()))
        removed[rule] = removed.get(rule, 0) + 1
    return SanitizeReport(_RANGE_CLASS.sub("", text), removed)


@dataclass(frozen=True)
class SanitizedJson:
    """A JSON tree with every string value cleaned, what was removed, and the keys that would change.

    ``unsafe_keys`` lists (raw) object keys that ``sanitize_text`` would change; they are kept as
    they are in ``value``, because a caller must refuse such a tree rather than rename a key.
    """

    value: Any
    removed: dict[str, int]
    unsafe_keys: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.removed)


def sanitize_json(value: Any) -> SanitizedJson:
    """Clean every string value in a JSON tree (dict, list, str, numbers, bools, None), at any depth.

    Walks iteratively (no recursion limit to trip over); the input is not modified.

    Args:
        value: a JSON value, e.g. a tool's input schema.

    Returns:
        The cleaned copy, removals per rule id summed over all strings, and the object keys that
        would change if cleaned (kept raw in the copy).
    """
    removed: dict[str, int] = {}
    unsafe_keys: list[str] = []

    def clean(text: str) -> str:
        report = sanitize_text(text)
        for rule, count in report.removed.items():
            removed[rule] = removed.get(rule, 0) + count
        return report.text

    root: list[Any] = [None]
    # Each work item: (source container or value, destination container, key/index in destination).
    work: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while work:
        source, target, slot = work.pop()
        if isinstance(source, dict):
            copy: dict[Any, Any] = {}
            target[slot] = copy
            for key, item in source.items():
                if isinstance(key, str) and sanitize_text(key).changed:
                    unsafe_keys.append(key)
                copy[key] = None
                work.append((item, copy, key))
        elif isinstance(source, list):
            items: list[Any] = [None] * len(source)
            target[slot] = items
            work.extend((item, items, index) for index, item in enumerate(source))
        elif isinstance(source, str):
            target[slot] = clean(source)
        else:
            target[slot] = source
    return SanitizedJson(root[0], removed, tuple(unsafe_keys))
