"""contain's one way to log: ``log = LazyLogger(__name__)`` at the top of a module, nothing else.

Why one lazy class and not ``logging.getLogger``: importing ``logging`` costs about as much as
starting a sandbox on a slow host, and ``contain run`` reaches the runtime without it. A module
that holds a ``LazyLogger`` does not import ``logging``; the long-running services (broker,
egress proxy, gate, MCP gateway) use the same class, so a reader meets one mechanism and one
name (``log``) everywhere, and moving code onto the start-up path never drags ``logging`` in.
``tests/unit/test__log.py`` walks ``src/contain`` to keep it so.

What a call does, by level:

- ``debug`` and ``info`` reach ``logging.getLogger(name)`` only if ``logging`` is already
  imported. Until something imports it no handler can be configured and the root level is
  WARNING, so such a record would be dropped anyway. ``contain`` switches debug on by importing
  ``logging`` and configuring it (``CONTAIN_DEBUG``, in ``contain.cli.main``).
- ``warning``, ``error`` and ``exception`` always go through ``logging`` (importing it), so its
  last-resort handler still prints them on stderr when nothing is configured.

Records carry the caller's file, line and function (not this module's), and ``exc_info`` is
passed through. Logs go to stderr only: nothing here configures a handler, and
``logging``'s last resort and ``contain``'s ``CONTAIN_DEBUG`` set-up both write to stderr.

Not provided: ``critical``, ``extra``, ``stack_info`` and level queries; no module needs them.
A log line never replaces raising or returning a decision.
"""

from __future__ import annotations

import sys

__all__ = ["LazyLogger"]

# ``logging``'s level numbers, fixed by its documentation; named here so that checking a level
# does not import it.
_DEBUG = 10
_INFO = 20
_WARNING = 30
_ERROR = 40

# Frames between ``logging``'s caller lookup and the code that logged: ``_emit``, the level
# method, then the caller. ``logging`` skips its own frames itself.
_CALLER_STACKLEVEL = 3

ExcInfo = bool | BaseException | None


class LazyLogger:
    """``logging.getLogger(name)``, imported only when a record could be shown (see the module)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def debug(self, msg: str, *args: object, exc_info: ExcInfo = None) -> None:
        self._emit(_DEBUG, msg, args, exc_info)

    def info(self, msg: str, *args: object, exc_info: ExcInfo = None) -> None:
        self._emit(_INFO, msg, args, exc_info)

    def warning(self, msg: str, *args: object, exc_info: ExcInfo = None) -> None:
        self._emit(_WARNING, msg, args, exc_info)

    def error(self, msg: str, *args: object, exc_info: ExcInfo = None) -> None:
        self._emit(_ERROR, msg, args, exc_info)

    def exception(self, msg: str, *args: object, exc_info: ExcInfo = True) -> None:
        """``error`` with the exception being handled, as ``logging.Logger.exception``."""
        self._emit(_ERROR, msg, args, exc_info)

    def _emit(self, level: int, msg: str, args: tuple[object, ...], exc_info: ExcInfo) -> None:
        if level < _WARNING and "logging" not in sys.modules:
            return
        import logging

        logging.getLogger(self.name).log(level, msg, *args, exc_info=exc_info, stacklevel=_CALLER_STACKLEVEL)
