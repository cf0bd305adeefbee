"""contain.gate's __all__ is sorted and every name resolves."""

import contain.gate


def test_all_is_sorted_and_resolves():
    assert contain.gate.__all__ == sorted(contain.gate.__all__)
    for name in contain.gate.__all__:
        assert getattr(contain.gate, name) is not None, name
