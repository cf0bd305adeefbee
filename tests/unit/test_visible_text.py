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
        assert for_terminal(chr(code)) in (f"\\u{code:04x}", f"\\U{code:08x}")


def test_no_control_or_format_character_survives():
    import unicodedata

    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    shown = for_terminal(everything)
    assert not [ch for ch in shown if unicodedata.category(ch) in ("Cc", "Cf", "Co", "Zl", "Zp")]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("read_file\ufe0f", "read_file\\ufe0f"),  # variation selector 16: no glyph
        ("read\U000e0100file", "read\\U000e0100file"),  # variation selector 17: smuggles bytes
        ("a\u034fb", "a\\u034fb"),  # combining grapheme joiner
        ("a\u17b4b", "a\\u17b4b"),  # Khmer inherent vowel
        ("a\u180bb", "a\\u180bb"),  # Mongolian free variation selector
    ],
)
def test_no_glyph_marks_that_hide_text_are_shown_as_escapes(raw, shown):
    assert for_terminal(raw) == shown


def test_count_escaped_counts_what_for_terminal_escapes():
    from contain.visible_text import count_escaped

    text = "a\x1b[2J\u202eb\nc\ufe0f"
    assert count_escaped(text) == 4
    assert count_escaped(text, keep_newlines=True) == 3
    assert count_escaped("plain ascii") == 0
    assert for_terminal(text).count("\\") == count_escaped(text)
