"""``take_inventory``: what a process started here could reach, in five groups.

The orchestrator, as an ordered checklist; every step gathers facts (I/O) and then classifies
them (pure), and every probed root is a parameter so tests run against a fixture home:

1. credentials: secret-looking variables, credential files, ``.env`` files (``credentials``)
2. files: home, working tree, shared writable directories, mounts (``files``)
3. network: routes, metadata reachability, resolvers, listeners, proxies (``network``); no
   packet is sent
4. processes: visible processes, daemon sockets, capabilities (``processes``)
5. records: what the credentials of step 1 would open (``records``)

Rendering (text and JSON) lives here too; neither ever includes a secret value, because items
never hold one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contain.inventory.credentials import classify_credentials, gather_credential_facts
from contain.inventory.files import classify_files, gather_file_facts
from contain.inventory.items import Group, InventoryItem, Verdict
from contain.inventory.network import classify_network, gather_network_facts
from contain.inventory.processes import classify_processes, gather_process_facts
from contain.inventory.records import classify_records, gather_record_facts
from contain.visible_text import for_terminal

__all__ = ["Inventory", "inventory_to_json", "render_inventory_text", "take_inventory"]


@dataclass(frozen=True)
class Inventory:
    """Every item found, and where it was looked for."""

    home: Path
    cwd: Path
    items: tuple[InventoryItem, ...]

    def in_group(self, group: Group) -> tuple[InventoryItem, ...]:
        """The items of one group, in the order found."""
        return tuple(item for item in self.items if item.group is group)


def take_inventory(
    *,
    home: Path,
    environ: Mapping[str, str],
    cwd: Path,
    root: Path = Path("/"),
    proc_root: Path = Path("/proc"),
) -> Inventory:
    """Probe what an unsandboxed process started in ``cwd`` could reach.

    Args:
        home: the home directory.
        environ: the environment such a process would inherit.
        cwd: its working directory.
        root: the file system root for system paths (sockets, resolv.conf, /tmp, passwd).
        proc_root: where procfs is mounted.

    Returns:
        The inventory; items never contain secret values.
    """
    credential_facts = gather_credential_facts(home=home, environ=environ, cwd=cwd)
    items = [
        *classify_credentials(credential_facts),
        *classify_files(gather_file_facts(home=home, cwd=cwd, environ=environ, root=root, proc_root=proc_root)),
        *classify_network(gather_network_facts(environ=environ, root=root, proc_root=proc_root)),
        *classify_processes(gather_process_facts(environ=environ, root=root, proc_root=proc_root)),
        *classify_records(gather_record_facts(credential_facts)),
    ]
    return Inventory(home=home, cwd=cwd, items=tuple(items))


def inventory_to_json(inventory: Inventory) -> dict[str, Any]:
    """The inventory as a JSON-able mapping, with counts per group and verdict."""
    counts = {g.value: {v.value: 0 for v in Verdict} for g in Group}
    for item in inventory.items:
        counts[item.group.value][item.verdict.value] += 1
    return {
        "home": str(inventory.home),
        "cwd": str(inventory.cwd),
        "summary": counts,
        "items": [item.to_json() for item in inventory.items],
    }


def render_inventory_text(inventory: Inventory) -> str:
    """One section per group, one line per item plus its reason."""
    lines = [f"What a process started in {for_terminal(inventory.cwd)} could reach:"]
    for group in Group:
        items = inventory.in_group(group)
        lines.append("")
        lines.append(f"{group.value} ({len(items)})")
        if not items:
            lines.append("  (none found)")
        for item in items:
            tag = f"  [{for_terminal(item.fingerprint)}]" if item.fingerprint else ""
            # Paths and socket names are attacker-chosen; never let them move the cursor or add lines.
            lines.append(f"  {item.verdict.value:<6} {item.kind:<20} {for_terminal(item.location)}{tag}")
            lines.append(f"         {for_terminal(item.reason)}")
    blocked = sum(1 for i in inventory.items if i.verdict is Verdict.BLOCK)
    review = sum(1 for i in inventory.items if i.verdict is Verdict.REVIEW)
    lines.append("")
    lines.append(
        f"{len(inventory.items)} item(s): {blocked} block, {review} review, "
        f"{len(inventory.items) - blocked - review} read"
    )
    return "\n".join(lines) + "\n"

