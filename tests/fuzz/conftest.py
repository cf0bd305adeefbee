"""Hypothesis profiles for the fuzzing suite (see docs/fuzzing.md).

``ci`` is the default: a modest number of examples per property, no deadline (the machine is
shared, so wall-clock limits would flake), no example database (a CI run leaves nothing behind and
does not depend on earlier runs), and derandomised so CI is reproducible. ``long`` is for a
deliberate fuzzing run: ``CONTAIN_FUZZ_PROFILE=long .venv/bin/python -m pytest -q tests/fuzz``; it
keeps failures in ``.hypothesis/`` so a found input is replayed first next time.
``CONTAIN_FUZZ_EXAMPLES`` overrides the number of examples per property for either profile.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_EXAMPLES = os.environ.get("CONTAIN_FUZZ_EXAMPLES")

settings.register_profile(
    "ci",
    max_examples=int(_EXAMPLES or 100),
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=int(_EXAMPLES or 2000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("CONTAIN_FUZZ_PROFILE", "ci"))
