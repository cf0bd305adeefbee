"""How the broker records refusals that no capability token vouches for, without a durable write each.

A request with no token, a forged or malformed one, bytes that are not HTTP, a request that
missed its deadline, a body the broker had no room for: anyone who can connect can produce these
as fast as the broker answers. Recorded one ledger entry (one fsync) each, they were a way to
fill the disk and to take the write lock from every sandbox doing real work (measured by the red
team: about 13,000 refusals in 5 s, 112 MB, with the raw 8 KiB action name stored each time).

So the promise for them is made per peer (the connecting uid from SO_PEERCRED, or ``tcp`` for
every loopback TCP client together) and per window of ``window_s`` seconds:

- the first such refusal of a peer in a window gets its own ``denial`` entry, durable before the
  reply, as every refusal did before;
- the others in that window are counted in memory, and one ``denial`` entry with
  ``code: refusals_summarized`` records them when the window is over: how many, the first and
  last time, the count per status and code, and the first ``SAMPLE_SIZE`` of them (time, status,
  code, bounded action name and reason). The summary is committed with the next refusal that
  gets an entry of its own, by the server loop's sweep within a second of the window's end, or
  when the broker closes;
- so a peer costs the ledger at most two entries per window, however fast it sends.

What is not promised: counts of a window still open when the broker is killed (SIGKILL, power
loss) are lost; the summary names the peer's uid, not which process or sandbox of that uid sent
each request (sandboxes that fall back to the shared uid 65534 share a peer); refusals of requests that carry a
valid token are not summarized (each has its own entry, as before).

Also here: ``bounded_text``, which keeps attacker-chosen names (an unknown action's name can be
8 KiB) to a short prefix and a digest of the whole, for the ledger and for replies.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_PEERS", "SAMPLE_SIZE", "RefusalTally", "RefusalWindow", "bounded_text"]

SAMPLE_SIZE = 8  # refusals kept verbatim (bounded) per summary
MAX_PEERS = 4096  # open windows kept apart; beyond this every new peer is counted under "other"
_NAME_PREFIX = 48
_REASON_LIMIT = 160


def bounded_text(text: str, *, limit: int = 64) -> str:
    """``text`` when it is at most ``limit`` characters, else a prefix, its length and its SHA-256.

    The digest keeps two long names apart in the ledger without storing either.
    """
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{text[:_NAME_PREFIX]}...[{len(text)} chars, sha256:{digest}]"


@dataclass
class RefusalWindow:
    """The refusals of one peer counted since the one that got its own entry."""

    peer: str
    opened: float  # time of the refusal that got its own entry
    count: int = 0
    first: float = 0.0
    last: float = 0.0
    by_code: Counter[str] = field(default_factory=Counter)
    sample: list[dict[str, Any]] = field(default_factory=list)

    def summary(self, window_s: float) -> dict[str, Any]:
        """The ``detail`` of the summary entry (JSON)."""
        status = int(self.by_code.most_common(1)[0][0].split(" ", 1)[0]) if self.by_code else 0
        codes = ", ".join(f"{key}: {n}" for key, n in sorted(self.by_code.items()))
        return {
            "status": status,
            "code": "refusals_summarized",
            "reason": f"{self.count} more refusals without a valid token from {self.peer} ({codes})",
            "peer": self.peer,
            "count": self.count,
            "first_time": self.first,
            "last_time": self.last,
            "window_opened": self.opened,
            "window_s": window_s,
            "by_code": dict(sorted(self.by_code.items())),
            "sample": list(self.sample),
        }


class RefusalTally:
    """Per-peer windows of refusals without a valid token (see the module docstring). Thread-safe."""

    def __init__(self, *, window_s: float = 5.0, max_peers: int = MAX_PEERS) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._max_peers = max_peers
        self._windows: dict[str, RefusalWindow] = {}
        self._due: list[RefusalWindow] = []  # closed windows with a count, not yet written
        self._lock = threading.Lock()

    def note(
        self, peer: str, *, now: float, status: int, code: str, reason: str, action: str, own_entry: bool = True
    ) -> bool:
        """Count one refusal; True when it must get an entry of its own (the first of a window).

        Args:
            peer: who connected (``uid:N``, ``tcp``, or ``-`` for an in-process caller).
            now: the broker's clock.
            status, code, reason, action: what the refusal's own entry would say.
            own_entry: False for a refusal that cannot wait for a write (a connection closed at
                accept): it is always counted, in a window opened for it if none is.
        """
        with self._lock:
            # bounded memory: once MAX_PEERS windows are open, new peers share one window
            key = peer if peer in self._windows or len(self._windows) < self._max_peers else "other"
            window = self._windows.get(key)
            if window is not None and now - window.opened >= self.window_s:
                self._close(key, window)
                window = None
            if window is None:
                window = self._windows[key] = RefusalWindow(key, now)
                if own_entry:
                    return True
            if window.count == 0:
                window.first = now
            window.count += 1
            window.last = now
            window.by_code[f"{status} {code}"] += 1
            if len(window.sample) < SAMPLE_SIZE:
                window.sample.append(
                    {
                        "time": now,
                        "status": status,
                        "code": code,
                        "action": bounded_text(action),
                        "reason": reason[:_REASON_LIMIT],
                    }
                )
            return False

    def take_due(self, *, now: float, everything: bool = False) -> list[RefusalWindow]:
        """Windows over by ``now`` (all open ones with ``everything``) that counted refusals; each
        is handed out once, for its summary entry."""
        with self._lock:
            for peer, window in list(self._windows.items()):
                if everything or now - window.opened >= self.window_s:
                    self._close(peer, window)
            due, self._due = self._due, []
        return due

    def give_back(self, windows: list[RefusalWindow]) -> None:
        """Windows whose summary could not be written: they are handed out again next time."""
        with self._lock:
            self._due[:0] = windows

    def _close(self, peer: str, window: RefusalWindow) -> None:
        del self._windows[peer]
        if window.count:
            self._due.append(window)
