"""Render untrusted text for a terminal: every control, format and bidi character made visible.

Tool names, arguments, reasons, action names and a sandbox's stderr are written by parties we do
not trust, and a human reads them in a terminal to decide. An ESC sequence can clear the screen,
move the cursor to overwrite a warning, or set the clipboard (OSC 52); a bidi override reorders
what a reviewer sees (CVE-2021-42574); a newline inside a name fakes a second listing row. So every
human-readable output passes untrusted strings through ``for_terminal`` and shows, for example,
``\\x1b[2J`` instead of a cleared screen.

Enforced: each character in the Unicode categories Cc (controls, incl. ESC, DEL and the C1 range
with the one-byte CSI 0x9B), Cf (format: zero-width, bidi embeddings/overrides/isolates, tag
characters), Co (private use), Cs (surrogates), Zl/Zp (line and paragraph separators), any space
other than U+0020, unassigned code points (Cn), and the rows of ``BLANK_LOOKING`` (no-glyph and
blank-rendering characters such as variation selectors and Hangul fillers) is replaced by its
escape (``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``). Newline and tab are escaped too unless the
caller keeps them for a multi-line block (then a line still cannot carry a control character).

Not enforced: meaning and lookalikes. Homoglyphs ("а" Cyrillic for "a") pass; combining marks
that do draw something (accents, strikes) pass; a literal backslash is not doubled, so a name that
already contains the text ``\\x1b`` looks like one holding ESC (the terminal is safe either way; the
digests tell them apart). Length is not bounded here: callers that relay streams cut long lines
(see ``contain.mcp.stdio_in_sandbox``). JSON output is never passed through here (it stays exact,
and JSON escapes controls itself).
"""

from __future__ import annotations

import unicodedata

__all__ = ["BLANK_LOOKING", "count_escaped", "for_terminal"]

# Characters outside the escaped categories that render as nothing or as blank space in common fonts,
# so a name can hide in them or carry data no reviewer sees: (first, last, what, why) rows.
_BLANK_LOOKING_ROWS: tuple[tuple[int, int, str], ...] = (
    (0x034F, 0x034F, "COMBINING GRAPHEME JOINER (Mn): no glyph, changes nothing visible"),
    (0x115F, 0x1160, "HANGUL CHOSEONG/JUNGSEONG FILLER (Lo): a letter that renders blank"),
    (0x17B4, 0x17B5, "KHMER VOWEL INHERENT AQ/AA (Mn): no glyph"),
    (0x180B, 0x180F, "MONGOLIAN FREE VARIATION SELECTORS (Mn; 180E is Cf): no glyph"),
    (0x2800, 0x2800, "BRAILLE PATTERN BLANK (So): a symbol that renders blank"),
    (0x3164, 0x3164, "HANGUL FILLER (Lo): a letter that renders blank"),
    (0xFE00, 0xFE0F, "VARIATION SELECTORS 1-16 (Mn): no glyph; 'read_file' + VS16 looks like 'read_file'"),
    (0xFFA0, 0xFFA0, "HALFWIDTH HANGUL FILLER (Lo): a letter that renders blank"),
    (0xE0100, 0xE01EF, "VARIATION SELECTORS 17-256 (Mn): no glyph; used to smuggle bytes invisibly"),
)

BLANK_LOOKING: frozenset[int] = frozenset(
    code for first, last, _why in _BLANK_LOOKING_ROWS for code in range(first, last + 1)
)

_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp", "Zs", "Cn"})


_NAMED_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(ch: str) -> str:
    if ch in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[ch]
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _is_shown_as_escape(ch: str, *, keep_newlines: bool) -> bool:
    if ch == " " or (" " < ch < "\x7f"):  # printable ASCII: the common case, decided without a lookup
        return False
    if keep_newlines and ch in "\n\t":
        return False
    return ord(ch) in BLANK_LOOKING or unicodedata.category(ch) in _ESCAPED_CATEGORIES


def for_terminal(text: object, *, keep_newlines: bool = False) -> str:
    """Return ``str(text)`` with every character that could control or fool a terminal escaped.

    Args:
        text: untrusted text (anything else is converted with ``str`` first).
        keep_newlines: keep ``\\n`` and ``\\t`` as they are, for multi-line blocks such as stderr.

    Returns:
        Text whose every character prints as itself: no escape sequence, bidi reordering, invisible
        character or (unless kept) line break remains.
    """
    value = str(text)
    if value.isascii() and value.isprintable():  # fast path: nothing to escape
        return value
    return "".join(_escape(ch) if _is_shown_as_escape(ch, keep_newlines=keep_newlines) else ch for ch in value)


def count_escaped(text: object, *, keep_newlines: bool = False) -> int:
    """How many characters of ``str(text)`` ``for_terminal`` would escape (for a warning line).

    Args:
        text: untrusted text, as given to ``for_terminal``.
        keep_newlines: as for ``for_terminal``.

    Returns:
        The number of characters shown as escapes; 0 when the text prints as itself.
    """
    value = str(text)
    if value.isascii() and value.isprintable():
        return 0
    return sum(1 for ch in value if _is_shown_as_escape(ch, keep_newlines=keep_newlines))
