"""What a task could reach on this host (inventory), and a lint of a boundary against its threats
(check)."""

from contain.inventory.check import (
    CheckReport,
    Finding,
    check_manifest,
    gather_check_facts,
    render_check_text,
    report_to_json,
    run_checks,
)
from contain.inventory.check_rules import CHECK_RULES, CheckFacts, CheckRule, Severity
from contain.inventory.collect import (
    Inventory,
    inventory_to_json,
    render_inventory_text,
    take_inventory,
)
from contain.inventory.draft import draft_manifest, write_draft_manifest
from contain.inventory.items import Group, InventoryItem, Verdict, redacted_fingerprint
from contain.inventory.sarif import report_to_sarif

__all__ = [
    "CHECK_RULES",
    "CheckFacts",
    "CheckReport",
    "CheckRule",
    "Finding",
    "Group",
    "Inventory",
    "InventoryItem",
    "Severity",
    "Verdict",
    "check_manifest",
    "draft_manifest",
    "gather_check_facts",
    "inventory_to_json",
    "redacted_fingerprint",
    "render_check_text",
    "render_inventory_text",
    "report_to_json",
    "report_to_sarif",
    "run_checks",
    "take_inventory",
    "write_draft_manifest",
]
