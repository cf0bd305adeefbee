"""The bench's HTML page in headless Chromium: the ladder chart is drawn (one mark per sample, the
axis labelled), host text stays text, and the page fetches nothing but itself."""

from __future__ import annotations

from contain.bench.pool import MemorySummary
from contain.bench.report_html import render_bench_html
from contain.bench.startup import _summarise

HOSTILE = '<script>document.title="pwned"</script><img src="http://198.51.100.7/x.png">'


def test_the_ladder_page_renders_its_chart_in_headless_chromium(tmp_path, chromium_page):
    rows = {
        "process-cold/true": [0.030, 0.034, 0.031, 0.040, 0.029],
        "process-pool/true": [0.008, 0.009, 0.012],
        "container:runc-cold/true": [0.120, 0.140],
        "container:runc-pool/true": [0.011, 0.015],
        "microvm-cold/true": [9.0, 12.0, 10.5],
        "microvm-pool/true": [0.9, 1.1, 1.0, 1.4],
    }
    summaries = {name: _summarise(name, values) for name, values in rows.items()}
    page_path = tmp_path / "ladder.html"
    page_path.write_text(
        render_bench_html(
            summaries=summaries,
            backends=["process", "container:runc", "microvm"],
            facts={"command": "contain bench startup", "host kernel": HOSTILE},
            text_report=HOSTILE,
            accelerators={"microvm": f"tcg (software emulation: {HOSTILE})"},
            memory={"microvm-cold": MemorySummary("microvm-cold", 3, 240 * 1024, 220 * 1024)},
        ),
        encoding="utf-8",
    )
    page, requests = chromium_page
    page.goto(page_path.as_uri())
    assert page.title() == "contain start-up ladder: process, container:runc, microvm"
    assert page.locator("#ladder circle.sample").count() == sum(len(v) for v in rows.values())
    assert page.locator("#ladder g.row").count() == 6
    assert page.locator('#ladder g.row[data-backend="microvm"][data-rung="cold"] circle').count() == 3
    ticks = page.locator("#ladder text.tick").all_text_contents()
    assert ticks[0] == "1 ms" and ticks[-1] == "100 s"
    assert page.locator("#ladder text.axis-title").text_content() == "start to the first command's result (log scale)"
    box = page.locator("#ladder").bounding_box()
    assert box is not None and box["width"] > 500 and box["height"] > 200  # drawn, not collapsed
    assert page.locator("script, img").count() == 0  # the hostile text stayed text
    assert HOSTILE in page.locator("#text-report").inner_text()
    assert requests == [page_path.as_uri()]  # self-contained: nothing else was fetched
