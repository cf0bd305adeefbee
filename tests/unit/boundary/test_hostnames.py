import pytest

from contain.boundary.hostnames import (
    HostnameError,
    HostnameIsAddress,
    canonical_hostname,
    canonical_pattern,
    is_ip_literal,
    looks_like_ip_literal,
)


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [("Example.COM", "example.com"), ("example.com.", "example.com"), ("bücher.example", "xn--bcher-kva.example")],
)
def test_canonical_hostname_normalises_case_dot_and_idna(raw, canonical):
    assert canonical_hostname(raw) == canonical


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "a\x00b.com",
        "evil.com\r\nHost: x",
        "a b.com",
        "allowed@evil.com",
        "ex%2ecom",
        "a\\b.com",
        "a..b",
        ".a.com",
        "-a.com",
        "example.com:443",
        "x" * 64 + ".com",
        "[::1]",
    ],
)
def test_canonical_hostname_refuses_hostile_spellings(raw):
    with pytest.raises(HostnameError):
        canonical_hostname(raw)


@pytest.mark.parametrize(
    "raw", ["127.1", "0177.0.0.1", "0x7f000001", "2130706433", "0x7f.0.0.01", "::1", "[::ffff:7f00:1]", "1.2.3.4"]
)
def test_ip_literals_in_every_spelling_are_recognised_and_refused_as_names(raw):
    assert is_ip_literal(raw)
    with pytest.raises(HostnameError):
        canonical_hostname(raw)


def test_patterns_allow_only_a_leading_wildcard_over_a_registered_domain():
    assert canonical_pattern("*.Example.com") == "*.example.com"
    for bad in ("*", "*.com", "a.*.com", "*example.com", "ex*.com"):
        with pytest.raises(HostnameError):
            canonical_pattern(bad)


# Issue 18 item 10: these were normalised INTO IP literals after the literal check ran.
NUMERIC_AFTER_CANONICALISATION = [
    "0X7F000001",
    "0X7F.0.0.1",
    "\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # full-width 127.0.0.1
    "\u00b9\u00b2\u2077.0.0.1",  # superscript 127
    "\uff10\uff58\uff17\uff46\uff10\uff10\uff10\uff10\uff10\uff11",  # full-width 0x7f000001
    "1\u00b2\u00b3",  # 123: a 32-bit address once nameprep has run
]


@pytest.mark.parametrize("raw", NUMERIC_AFTER_CANONICALISATION)
def test_names_whose_canonical_form_is_an_ip_literal_are_refused_as_addresses(raw):
    with pytest.raises(HostnameIsAddress):
        canonical_hostname(raw)
    with pytest.raises(HostnameError):
        canonical_pattern(raw)


@pytest.mark.parametrize(
    "raw", ["Example.COM.", "B\u00fccher.example", "x\u00b2y.example", "a\u3002b.example", "xn--bcher-kva.example"]
)
def test_canonicalisation_is_idempotent(raw):
    once = canonical_hostname(raw)
    assert canonical_hostname(once) == once


@pytest.mark.parametrize("raw", ["127.0.0.1\n", "1\n", "0x7f\n"])
def test_the_literal_shape_test_does_not_stop_at_a_trailing_newline(raw):
    assert not looks_like_ip_literal(raw)
    with pytest.raises(HostnameError, match="control character"):
        canonical_hostname(raw)
