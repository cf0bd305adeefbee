"""Loggers that do not import ``logging`` on the sandbox start-up path.

Importing ``logging`` costs about as much as starting a sandbox on a slow host, and the runtime
only logs debug detail and rare warnings. Debug records go to the standard logger only when
``logging`` is already imported: until something imports it, no handler can be configured,
so the records would be dropped anyway. Warnings always go through ``logging`` (importing it),
so its last-resort handler still prints them when nothing is configured.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["LazyLogger"]


class LazyLogger:
    """``logging.getLogger(name)`` for ``debug`` and ``warning``, imported on first real use."""

    def __init__(self, name: str) -> None:
        self.name = name

    def debug(self, msg: str, *args: Any) -> None:
        logging = sys.modules.get("logging")
        if logging is not None:
            logging.getLogger(self.name).debug(msg, *args)

    def warning(self, msg: str, *args: Any) -> None:
        import logging

        logging.getLogger(self.name).warning(msg, *args)
