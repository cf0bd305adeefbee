"""Fixtures shared by the runtime unit tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def wakeup() -> Iterator[int]:
    """A descriptor that is readable at once, so a backend's wait loop never blocks on it."""
    ours, theirs = socket.socketpair()
    theirs.send(b"x")
    yield ours.fileno()
    ours.close()
    theirs.close()
