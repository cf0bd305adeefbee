"""Boundaries the k8s tests render: one with network and a read input, one without network."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contain.boundary.load import boundary_from_mapping
from contain.boundary.model import Boundary

DIGEST = "0123456789abcdef" * 4
IMAGE = f"registry.test/tools@sha256:{DIGEST}"
PROXY_IMAGE = f"registry.test/contain@sha256:{DIGEST}"

NETWORKED: dict[str, Any] = {
    "version": 1,
    "task": "inv-1",
    "files": [
        {"path": "/inputs/data", "access": "read", "host": "/srv/data"},
        {"path": "/inputs/prompts", "access": "read", "host": "/srv/prompts"},
        {"path": "/work", "access": "scratch"},
    ],
    "network": {"allow": [{"host": "api.example.com", "ports": [443]}, {"host": "*.pypi.org", "ports": [443, 80]}]},
    "resources": {"memory_bytes": "1GiB", "disk_bytes": "128MiB", "cpu_cores": 1.5, "wall_s": "90.5s"},
    "env": {"MODE": "fast $(HOME)"},
    "kubernetes": {
        "image": IMAGE,
        "proxy_image": PROXY_IMAGE,
        "inputs": [
            {"path": "/inputs/data", "claim": "invoices"},
            {"path": "/inputs/prompts", "config_map": "prompts"},
        ],
    },
}

OFFLINE: dict[str, Any] = {
    "version": 1,
    "task": "offline",
    "kubernetes": {"image": IMAGE},
}


def make_boundary(base: dict[str, Any], **changes: Any) -> Boundary:
    """``base`` with top-level keys replaced, validated as a manifest."""
    data = copy.deepcopy(base)
    data.update(copy.deepcopy(changes))
    return boundary_from_mapping(data)


@pytest.fixture
def networked() -> Boundary:
    return make_boundary(NETWORKED)


@pytest.fixture
def offline() -> Boundary:
    return make_boundary(OFFLINE)
