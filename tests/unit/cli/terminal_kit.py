"""Hostile text for terminal-output tests, and the one assertion every such test makes.

Each value carries what issue 19 item 2 used or names: an erase-screen plus cursor-home (the
fake-listing attack), an OSC 52 clipboard write, a one-byte CSI, a bidi override, a zero-width
space and a line break that starts a fake row.
"""

from __future__ import annotations

import unicodedata

FAKE_ROW = "r-000000000000  approved  2026-01-01 00:00:00 UTC  alice  fs__read_file  {}"
HOSTILE = f"evil\x1b[2J\x1b[H\x1b]52;c;ZXZpbA==\x07\x9b31m\u202eelif_daer\u200b\n{FAKE_ROW}"

# What the rendered text must show instead (every escape spelled out).
HOSTILE_SHOWN = (
    "evil\\x1b[2J\\x1b[H\\x1b]52;c;ZXZpbA==\\x07\\x9b31m\\u202eelif_daer\\u200b\\n" + FAKE_ROW
)


def raw_controls(text: str) -> list[str]:
    """Every character in ``text`` that would act on a terminal (line breaks and tabs aside)."""
    return [
        ch
        for ch in text
        if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp")
    ]


def assert_terminal_safe(text: str) -> None:
    """No control, format or bidi character, and no line that starts like a faked row."""
    assert not raw_controls(text), [hex(ord(ch)) for ch in raw_controls(text)]
    assert not [line for line in text.splitlines() if line.startswith(FAKE_ROW[:10])], text
