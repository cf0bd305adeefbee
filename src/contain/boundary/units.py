"""Parsing of sizes and durations in manifests.

A key names its unit (``memory_bytes``, ``wall_s``); a value may be a plain number in that unit
or a string that carries its own unit ("512MiB", "90s", "10m"). Anything else is refused, so a
bare "512" never silently means kilobytes somewhere and bytes elsewhere.
"""

from __future__ import annotations

import math
import re

__all__ = ["MAX_BYTES", "MAX_SECONDS", "format_bytes", "parse_bytes", "parse_seconds"]

# Binary and decimal multipliers, as written in `man 7 units`-style docs.
_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SECOND_UNITS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
# ASCII digits only (str.isdigit and \\d accept "²" and "٣"), and a bounded number of them, so a
# 400-digit size is refused here instead of overflowing a float further on.
_NUMBER_UNIT = re.compile(r"[ \t]*([0-9]{1,20}(?:\.[0-9]{1,9})?)[ \t]*([a-zA-Z]{0,3})[ \t]*")
# Upper bounds that keep every value inside the 64-bit fields the kernel takes (cgroup files,
# setrlimit): a size of 1 EiB or a duration of ~31 years is already past any real budget.
MAX_BYTES = 1 << 60
MAX_SECONDS = 1e9


def parse_bytes(value: object) -> int:
    """Turn ``512MiB``, ``1GB`` or a plain integer into bytes.

    Raises:
        ValueError: for negatives, sizes above ``MAX_BYTES``, unknown units, booleans or other types.
    """
    if isinstance(value, bool):
        raise ValueError("expected a size such as 512MiB, not a boolean")
    size: int | None = None
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        match = _NUMBER_UNIT.fullmatch(value)
        if match and match.group(2).lower() in _BYTE_UNITS:
            size = int(float(match.group(1)) * _BYTE_UNITS[match.group(2).lower()])
    if size is not None:
        if size < 0:
            raise ValueError("a size cannot be negative")
        if size > MAX_BYTES:
            raise ValueError(f"a size larger than {MAX_BYTES} bytes (1 EiB) is refused")
        return size
    raise ValueError(f"{value!r} is not a size; write bytes as a number or with a unit: 512MiB, 2GiB, 100MB")


def parse_seconds(value: object) -> float:
    """Turn ``90s``, ``10m``, ``500ms`` or a plain number into seconds.

    Raises:
        ValueError: for negatives, NaN, durations above ``MAX_SECONDS``, unknown units, booleans
            or other types.
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, not a boolean")
    seconds: float | None = None
    if isinstance(value, int) and abs(value) <= MAX_SECONDS:  # a larger int may not fit a float
        seconds = float(value)
    elif isinstance(value, int):
        seconds = math.inf if value > 0 else -math.inf
    elif isinstance(value, float):
        seconds = value
    elif isinstance(value, str):
        match = _NUMBER_UNIT.fullmatch(value)
        if match and match.group(2).lower() in _SECOND_UNITS:
            seconds = float(match.group(1)) * _SECOND_UNITS[match.group(2).lower()]
    if seconds is not None:
        if seconds < 0:
            raise ValueError("a duration cannot be negative")
        if not seconds <= MAX_SECONDS:  # also refuses NaN
            raise ValueError(f"a duration must be a finite number of seconds up to {MAX_SECONDS:.0e}")
        return seconds
    raise ValueError(f"{value!r} is not a duration; write seconds as a number or with a unit: 500ms, 30s, 10m, 1h")


def format_bytes(size: int) -> str:
    """Render bytes the way a manifest would write them (``512MiB``)."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
