"""`contain bench`: argument bounds are refused before anything is measured."""

from __future__ import annotations

import pytest

from contain.cli import main


@pytest.mark.parametrize(
    "args",
    [["--rounds", "0"], ["--concurrency", "0"], ["--throughput-count", "-1"]],
    ids=["no-rounds", "no-concurrency", "negative-count"],
)
def test_out_of_range_arguments_exit_2_without_measuring(args, capsys, monkeypatch):
    import contain.bench.startup as startup

    def refuse(**_: object) -> None:
        raise AssertionError("nothing may be measured for refused arguments")

    monkeypatch.setattr(startup, "measure_startup", refuse)
    monkeypatch.setattr(startup, "measure_throughput", refuse)
    assert main(["bench", "startup", *args]) == 2
    assert "--rounds and --concurrency must be 1 or more, --throughput-count 0 or more" in capsys.readouterr().err


def test_only_startup_can_be_measured(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["bench", "throughput"])
    assert exited.value.code == 2
    assert "invalid choice: 'throughput'" in capsys.readouterr().err


def test_a_negative_pool_size_exits_2_without_measuring(capsys, monkeypatch):
    import contain.bench.pool as pool_bench
    import contain.bench.startup as startup

    def refuse(**_: object) -> None:
        raise AssertionError("nothing may be measured for refused arguments")

    monkeypatch.setattr(startup, "measure_startup", refuse)
    monkeypatch.setattr(pool_bench, "measure_pool_startup", refuse)
    assert main(["bench", "startup", "--pool-size", "-1"]) == 2
    assert "--pool-size must be 0 (no pool rows) or more" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("backend", "cause"),
    [
        ("container:crun", "container runtime 'crun' is unknown"),
        ("bwrap", "backend 'bwrap' is unknown"),
    ],
)
def test_a_backend_the_bench_cannot_measure_exits_125_with_the_cause_before_measuring(
    backend, cause, capsys, monkeypatch
):
    import contain.bench.startup as startup

    def refuse(**_: object) -> None:
        raise AssertionError("nothing may be measured for a refused backend")

    monkeypatch.setattr(startup, "measure_startup", refuse)
    assert main(["bench", "startup", "--backend", f"process,{backend}"]) == 125
    assert cause in capsys.readouterr().err


def test_the_backend_list_reaches_the_measurement_as_full_specs(capsys, monkeypatch):
    import contain.bench.startup as startup

    seen: dict[str, object] = {}

    def record(**kwargs: object) -> dict[str, startup.Summary]:
        seen.update(kwargs)
        return {}

    monkeypatch.setattr(startup, "measure_startup", record)
    args = ["--backend", "container,container:runsc", "--throughput-count", "0", "--pool-size", "0"]
    assert main(["bench", "startup", *args]) == 0  # --pool-size 0: a unit test starts no real pool
    assert seen["backends"] == ("container:runc", "container:runsc")


def _fake_pool_measurement():
    from contain.bench.pool import MemorySummary, PoolMeasurement
    from contain.bench.startup import _summarise

    rows = {
        "process-cold/true": [0.030, 0.034, 0.031],
        "process-pool/true": [0.008, 0.009, 0.007],
        "process-pool-acquire": [0.0001, 0.0002, 0.0001],
        "microvm-cold/true": [9.0, 12.0, 10.5],
        "microvm-cold/python": [14.0, 16.0, 15.0],
        "microvm-pool/true": [0.9, 1.1, 1.0],
        "microvm-pool-acquire": [0.0001, 0.0001, 0.0002],
    }
    summaries = {name: _summarise(name, values) for name, values in rows.items()}
    accelerator = "tcg (software emulation: KVM does not boot the guest here: \x1b[31m<b>qemu</b> aborted)"
    memory = {"microvm-cold": MemorySummary("microvm-cold", 3, 240 * 1024, 220 * 1024)}
    return PoolMeasurement(summaries, memory, {"microvm": accelerator})


def test_microvm_is_measured_and_html_writes_a_page_with_every_sample_and_escaped_host_text(
    tmp_path, capsys, monkeypatch
):
    import contain.bench.pool as pool_bench
    import contain.bench.startup as startup

    seen: dict[str, object] = {}

    def startup_rows(**kwargs: object) -> dict[str, startup.Summary]:
        seen.update(kwargs)
        return {"contain-session[microvm]/true": startup._summarise("contain-session[microvm]/true", [0.1, 0.2])}

    monkeypatch.setattr(startup, "measure_startup", startup_rows)
    monkeypatch.setattr(pool_bench, "measure_pool_startup", lambda **_: _fake_pool_measurement())
    page = tmp_path / "ladder.html"
    args = ["bench", "startup", "--backend", "process,microvm", "--throughput-count", "0", "--html", str(page)]
    assert main(args) == 0
    assert seen["backends"] == ("process", "microvm")
    out = capsys.readouterr().out
    assert "\x1b" not in out  # QEMU's words reach the terminal only through for_terminal
    assert "cold: start to the first exec of /bin/true" in out
    text = page.read_text()
    assert text.count('<circle class="sample"') == 12  # cold and warm of both backends, 3 samples each
    assert "<b>qemu</b>" not in text and "&lt;b&gt;qemu&lt;/b&gt;" in text
