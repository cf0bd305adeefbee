import pytest

from contain.boundary.units import format_bytes, parse_bytes, parse_seconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [(512, 512), ("512MiB", 512 * 1024**2), ("1GB", 10**9), ("2 GiB", 2 * 1024**3), ("100kb", 100_000), ("0", 0)],
)
def test_parse_bytes_accepts_numbers_and_units(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["12 parsecs", "-5", -1, True, "MiB", None, 1.5])
def test_parse_bytes_refuses_everything_else(bad):
    with pytest.raises(ValueError):
        parse_bytes(bad)


@pytest.mark.parametrize(
    ("text", "expected"), [(30, 30.0), ("90s", 90.0), ("10m", 600.0), ("500ms", 0.5), ("1h", 3600.0), (2.5, 2.5)]
)
def test_parse_seconds_accepts_numbers_and_units(text, expected):
    assert parse_seconds(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["soon", -1, False, "10 fortnights"])
def test_parse_seconds_refuses_everything_else(bad):
    with pytest.raises(ValueError):
        parse_seconds(bad)


def test_format_bytes_uses_the_largest_exact_unit():
    assert [format_bytes(n) for n in (512 * 1024**2, 3 * 1024**3, 1536, 1000)] == ["512MiB", "3GiB", "1536B", "1000B"]


@pytest.mark.parametrize("huge", [10**400, "9" * 400, "9" * 400 + "MiB", "99999999999999999999TiB", 2**61])
def test_parse_bytes_refuses_sizes_past_one_exbibyte_without_overflowing(huge):
    with pytest.raises(ValueError, match=r"not a size|1 EiB"):
        parse_bytes(huge)


@pytest.mark.parametrize("huge", [10**400, -(10**400), "9" * 400, float("inf"), float("nan"), "99999999999999999999h"])
def test_parse_seconds_refuses_huge_and_non_finite_durations_with_a_value_error(huge):
    with pytest.raises(ValueError):
        parse_seconds(huge)


@pytest.mark.parametrize("spelling", ["²", "٣s", "1²MiB", "10\n", "5s\n"])
def test_sizes_and_durations_accept_ascii_digits_only(spelling):
    with pytest.raises(ValueError):
        parse_bytes(spelling)
    with pytest.raises(ValueError):
        parse_seconds(spelling)
