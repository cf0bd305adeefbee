"""for_terminal: what reaches a human's terminal prints as itself."""

import pytest

from contain.visible_text import BLANK_LOOKING, for_terminal


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("billing.update", "billing.update"),
        ("\x1b[2J\x1b[Hfake", "\\x1b[2J\\x1b[Hfake"),
        ("\x1b]52;c;ZXZpbA==\x07", "\\x1b]52;c;ZXZpbA==\\x07"),
        ("a\x9bb", "a\\x9bb"),  # one-byte CSI
        ("a\x7fb", "a\\x7fb"),
        ("name\nfake row", "name\\nfake row"),
        ("tab\there", "tab\\there"),
        ("abc\u202edcba", "abc\\u202edcba"),  # bidi override
        ("x\u200by", "x\\u200by"),  # zero-width space
        ("x\U000e0041y", "x\\U000e0041y"),  # tag character
        ("x\u00a0y", "x\\xa0y"),  # no-break space
        ("x\u2028y", "x\\u2028y"),  # line separator
        ("x\u3164y", "x\\u3164y"),  # hangul filler, a letter that renders blank
        ("résumé ✓ 日本", "résumé ✓ 日本"),  # ordinary non-ASCII text is kept
    ],
)
def test_controls_and_invisible_characters_are_shown_as_escapes(raw, shown):
    assert for_terminal(raw) == shown


def test_keep_newlines_keeps_line_breaks_but_not_controls():
    assert for_terminal("line 1\n\tline 2\x1b[A\r", keep_newlines=True) == "line 1\n\tline 2\\x1b[A\\r"


def test_non_strings_are_converted_first():
    assert for_terminal(42) == "42"


def test_every_blank_looking_row_is_escaped():
    for code in BLANK_LOOKING:
        assert for_terminal(chr(code)).startswith("\\u")


def test_no_control_or_format_character_survives():
    import unicodedata

    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    shown = for_terminal(everything)
    assert not [ch for ch in shown if unicodedata.category(ch) in ("Cc", "Cf", "Co", "Zl", "Zp")]
