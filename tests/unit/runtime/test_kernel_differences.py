from __future__ import annotations

import importlib.resources
import re

import pytest

from contain.runtime.kernel_differences import (
    KERNEL_DIFFERENCES,
    WORKLOAD_KERNELS,
    reported_differences,
    supervisor_difference_args,
)
from contain.runtime.supervisor_channel import SECUREBITS_STATES, Ready


def _supervisor_table_names() -> list[str]:
    source = importlib.resources.files("contain.runtime.supervisor").joinpath("contain-supervisor.c").read_text()
    table = source[source.index("KERNEL_DIFFERENCES[N_DIFFERENCES] = {") :]
    table = table[: table.index("\n};")]
    return re.findall(r'\] = \{\s*"([a-z-]+)"', table)


def test_every_row_is_a_row_of_the_supervisors_table_and_back() -> None:
    assert sorted(row.name for row in KERNEL_DIFFERENCES) == sorted(_supervisor_table_names())


@pytest.mark.parametrize("row", KERNEL_DIFFERENCES, ids=lambda row: row.name)
def test_every_row_names_known_kernels_never_linux_and_says_why(row: object) -> None:
    assert row.kernels and row.kernels <= set(WORKLOAD_KERNELS)  # type: ignore[attr-defined]
    assert "linux" not in row.kernels  # type: ignore[attr-defined]
    assert row.why and row.missing and row.measured  # type: ignore[attr-defined]


def test_linux_gets_no_accepted_difference() -> None:
    assert supervisor_difference_args(kernel="linux") == ()


def test_gvisor_gets_exactly_the_no_securebits_difference() -> None:
    assert supervisor_difference_args(kernel="gvisor") == ("--accept-difference", "no-securebits")


def test_an_unknown_kernel_is_refused_rather_than_treated_as_linux() -> None:
    with pytest.raises(ValueError, match="unknown workload kernel 'gVisor'"):
        supervisor_difference_args(kernel="gVisor")


@pytest.mark.parametrize("securebits", SECUREBITS_STATES)
def test_ready_reports_the_securebits_row_only_when_the_kernel_lacked_them(securebits: str) -> None:
    ready = Ready(pid=1, landlock="off", landlock_abi=0, securebits=securebits)
    expected = ["no-securebits"] if securebits == "unsupported" else []
    assert [row.name for row in reported_differences(ready)] == expected
