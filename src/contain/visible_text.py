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
other than U+0020, and the rows of ``BLANK_LOOKING`` is replaced by its escape (``\\xNN``,
``\\uNNNN`` or ``\\UNNNNNNNN``). Newline and tab are escaped too unless the caller keeps them for a
multi-line block (then a line still cannot carry a control character).

Not enforced: meaning and lookalikes. Homoglyphs ("а" Cyrillic for "a") pass; JSON output is
never passed through here (it stays exact, and JSON escapes controls itself).
"""

from __future__ import annotations

import unicodedata

__all__ = ["BLANK_LOOKING", "for_terminal"]

# Letters (category Lo/So) that render as blank space in common fonts, so a name can hide in them.
BLANK_LOOKING: frozenset[int] = frozenset(
    {
        0x115F,  # HANGUL CHOSEONG FILLER
        0x1160,  # HANGUL JUNGSEONG FILLER
        0x2800,  # BRAILLE PATTERN BLANK
        0x3164,  # HANGUL FILLER
        0xFFA0,  # HALFWIDTH HANGUL FILLER
    }
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
