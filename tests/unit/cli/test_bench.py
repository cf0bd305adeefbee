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
