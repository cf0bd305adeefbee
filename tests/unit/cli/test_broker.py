"""`contain broker serve`'s start-up lines: reconciled intents quote workload-chosen values."""

from __future__ import annotations

import json

from cli.terminal_kit import HOSTILE, assert_terminal_safe
from contain.cli.broker import reconciled_lines


def test_reconciled_intents_are_exact_json_that_cannot_act_on_the_terminal():
    report = [{"action": "write_record", "path": f"/records/{HOSTILE}", "outcome": "rolled back"}]
    (line,) = reconciled_lines(report)
    assert_terminal_safe(line)
    assert line.isascii()
    assert json.loads(line.removeprefix("contain broker: reconciled ")) == report[0]
