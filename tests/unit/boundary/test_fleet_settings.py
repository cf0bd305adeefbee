"""The manifest's fleet: section: safe defaults, bounds, strict keys, invisible to the runtime."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contain.boundary.fleet_settings import MAX_FLEET_RETRIES, MAX_WARM_SANDBOXES, FleetSettings
from contain.boundary.model import Boundary
from contain.boundary.plain import plain_boundary


def test_defaults_retry_twice_and_keep_two_warm_sandboxes() -> None:
    assert FleetSettings() == FleetSettings(retries=2, warm_sandboxes=2)
    assert Boundary().fleet == FleetSettings()


@pytest.mark.parametrize("bad", [{"retries": -1}, {"retries": MAX_FLEET_RETRIES + 1},
                                 {"warm_sandboxes": MAX_WARM_SANDBOXES + 1}, {"retry": 1}])
def test_out_of_range_values_and_unknown_keys_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        Boundary.model_validate({"fleet": bad})


def test_every_field_has_a_description_with_an_example() -> None:
    for name, info in FleetSettings.model_fields.items():
        assert info.description and "e.g." in info.description, name


def test_the_runtime_copy_of_a_boundary_does_not_carry_the_fleet_section() -> None:
    plain = plain_boundary(Boundary.model_validate({"fleet": {"retries": 0}}))
    assert not hasattr(plain, "fleet")
