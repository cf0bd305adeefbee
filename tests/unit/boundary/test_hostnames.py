import pytest

from contain.boundary.hostnames import HostnameError, canonical_hostname, canonical_pattern, is_ip_literal


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
