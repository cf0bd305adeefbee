import ipaddress

import pytest

from contain.egress.capture import PLACEHOLDER_NETWORK, PlaceholderTable


def test_placeholders_are_stable_sequential_and_inside_the_reserved_range() -> None:
    table = PlaceholderTable()
    first = table.allocate("a.test")
    second = table.allocate("b.test")
    assert (first, second) == (
        ipaddress.IPv4Address("127.77.0.1"),
        ipaddress.IPv4Address("127.77.0.2"),
    )
    assert table.allocate("a.test") == first
    assert first in PLACEHOLDER_NETWORK and second in PLACEHOLDER_NETWORK
    assert table.items() == [("a.test", first), ("b.test", second)]


def test_a_full_table_refuses_new_names_but_keeps_old_ones() -> None:
    table = PlaceholderTable(max_names=1)
    table.allocate("a.test")
    with pytest.raises(OverflowError):
        table.allocate("b.test")
    assert table.get("a.test") == ipaddress.IPv4Address("127.77.0.1")
