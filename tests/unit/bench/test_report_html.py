"""The bench's HTML page (pure): one mark per sample, axis labels, nothing fetched, host text escaped."""

from __future__ import annotations

from html.parser import HTMLParser

from contain.bench.pool import MemorySummary
from contain.bench.report_html import _ticks, render_bench_html, render_ladder_svg
from contain.bench.startup import Summary, _summarise

HOSTILE = '<script>alert(1)</script><img src="http://198.51.100.7/x">"\' onload=x'


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    return parser


def _summaries() -> dict[str, Summary]:
    rows = {
        "process-cold/true": [0.030, 0.034, 0.031, 0.040],
        "process-pool/true": [0.008, 0.009],
        "microvm-cold/true": [9.0, 12.0, 10.5],
        "microvm-pool/true": [0.9, 1.1, 1.0],
        "contain-session[microvm]/true": [0.1, 0.2],
    }
    return {name: _summarise(name, values) for name, values in rows.items()}


def _page(**overrides: object) -> str:
    arguments: dict[str, object] = {
        "summaries": _summaries(),
        "backends": ["process", "microvm"],
        "facts": {"command": "contain bench startup --backend process,microvm", "host kernel": HOSTILE},
        "text_report": f"variant ... {HOSTILE}",
        "accelerators": {"microvm": f"tcg (software emulation: {HOSTILE})"},
        "memory": {"microvm-cold": MemorySummary("microvm-cold", 3, 240 * 1024, 220 * 1024)},
    }
    arguments.update(overrides)
    return render_bench_html(**arguments)  # type: ignore[arg-type]


def test_the_chart_has_one_mark_per_sample_and_one_row_per_backend_and_rung():
    elements = _parse(_page())
    circles = [a for t, a in elements.tags if t == "circle" and a.get("class") == "sample"]
    assert len(circles) == 4 + 2 + 3 + 3  # the session row is not a rung of the ladder
    rows = [(a["data-backend"], a["data-rung"]) for t, a in elements.tags if t == "g" and "data-rung" in a]
    assert rows == [("process", "cold"), ("process", "warm"), ("microvm", "cold"), ("microvm", "warm")]


def test_the_axis_is_labelled_in_decades_with_its_title_and_targets_are_marked_on_microvm_rows():
    elements = _parse(_page())
    text = "".join(elements.text)
    for label in ("1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s"):
        assert label in text
    assert "start to the first command's result (log scale)" in text
    targets = [a for t, a in elements.tags if t == "line" and a.get("class") == "target"]
    assert len(targets) == 2  # microvm cold (3 s) and warm (0.3 s)
    assert "target 3 s" in text and "target 300 ms" in text


def test_host_text_is_escaped_everywhere_and_nothing_can_be_fetched_or_run():
    page = _page()
    elements = _parse(page)
    tags = {t for t, _ in elements.tags}
    assert "script" not in tags and "img" not in tags and "link" not in tags
    assert not [a for _, a in elements.tags if any(k in a for k in ("src", "href", "onload"))]
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 3  # facts, accelerator line, text report
    csp = [a for t, a in elements.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == [
        {"http-equiv": "Content-Security-Policy", "content": "default-src 'none'; style-src 'unsafe-inline'"}
    ]


def test_the_microvm_table_carries_the_targets_and_the_vmm_memory():
    text = "".join(_parse(_page()).text)
    assert "cold: start to the first exec of /bin/true" in text
    assert "RSS 240.0 MiB, PSS 220.0 MiB (median of 3)" in text
    assert "microvm against its targets" in text
    assert "microvm against its targets" not in "".join(_parse(_page(backends=["process"], accelerators={})).text)


def test_summaries_read_back_without_samples_still_chart_their_median():
    bare = {"process-cold/true": Summary("process-cold/true", 5, 0.03, 0.04)}
    svg = render_ladder_svg([("process", "cold", bare["process-cold/true"])])
    assert 'class="median"' in svg and 'class="sample"' not in svg
    assert render_ladder_svg([]) == '<p id="no-chart">no start-up samples to chart</p>'


def test_ticks_cover_the_samples_in_decades_with_steps_between_when_the_range_is_narrow():
    assert _ticks(0.003, 0.08) == [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1]
    assert _ticks(0.002, 12.0) == [0.001, 0.01, 0.1, 1.0, 10.0, 100.0]
