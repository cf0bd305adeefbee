"""The HTML report renders in headless Chromium: title, score table, a case's details open."""

from __future__ import annotations

import pytest

from contain.probe.context import RunContext
from contain.probe.registry import load_cases
from contain.probe.report import render_html
from contain.probe.runner import run_battery
from contain.probe.targets import ContainTarget

pytestmark = [pytest.mark.needs_bwrap, pytest.mark.needs_root]


def test_html_report_renders_in_headless_chromium(host_tmp, chromium_page):
    ctx = RunContext(ContainTarget("process"))
    try:
        report = run_battery(load_cases(), ctx, patterns="FS-01,PR-01,XT-07")
    finally:
        ctx.close()
    page_path = host_tmp / "report.html"
    page_path.write_text(render_html(report), encoding="utf-8")

    page, requests = chromium_page
    page.goto(page_path.as_uri())
    assert page.title() == "contain probe report: contain:process"
    rows = page.locator("#scores tbody tr")
    assert rows.count() == 4  # FS, PR, XT and the total row
    assert page.locator("#scores tbody tr").first.locator("td").first.inner_text() == "FS"
    assert page.locator("#case-FS-01 .v").inner_text() == "CONTAINED"
    assert page.locator("#case-XT-07 .v").inner_text() == "NOT_APPLICABLE"
    details = page.locator("#case-FS-01 details")
    assert details.get_attribute("open") is None
    details.locator("summary").click()
    assert details.get_attribute("open") == ""
    assert details.locator("pre").is_visible()
    assert requests == [page_path.as_uri()]  # self-contained: nothing else was fetched
