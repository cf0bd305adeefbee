"""A validated boundary as plain frozen dataclasses: what the runtime reads, without pydantic.

``contain.boundary.model`` is the one place a boundary is *validated* (shape, contradictions,
units, hostnames). The runtime only *reads* a boundary that already passed, and importing
pydantic and building the models costs more than starting a sandbox; so the runtime takes a
``PlainBoundary``: the same attribute names and the same enum members as the model, built either
from a validated ``Boundary`` (``plain_boundary``) or from its JSON dump kept in the validation
cache (``plain_from_json``, see ``contain.boundary.cache``).

Each class mirrors one model field for field, except ``Boundary.version`` (always 1),
``Boundary.tools`` (read by the gate, never by the runtime) and ``Boundary.kubernetes`` (read by
``contain k8s render`` only). A test holds the mirrors to the
models, and ``plain_from_json`` refuses a missing or unknown key, so a field added to a model
but not here fails loudly instead of being dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from contain.boundary.kinds import Backend, CredentialVia, FileAccess, LayerRequirement, Threat

if TYPE_CHECKING:
    from contain.boundary.model import Boundary

__all__ = [
    "NOT_MIRRORED",
    "PlainBoundary",
    "PlainContainerRuntime",
    "PlainCredential",
    "PlainFileRule",
    "PlainHardening",
    "PlainMicrovmRuntime",
    "PlainNetwork",
    "PlainNetworkRule",
    "PlainRecordRule",
    "PlainResources",
    "PlainRuntime",
    "plain_boundary",
    "plain_from_json",
]

# Boundary fields the runtime never reads; they are not mirrored (and ignored in a dump).
# ``kubernetes`` is read only by ``contain k8s render``, which takes the validated section itself.
NOT_MIRRORED = frozenset({"version", "tools", "kubernetes"})


@dataclass(frozen=True)
class PlainFileRule:
    path: str
    access: FileAccess
    host: str | None = None
    protect: tuple[str, ...] = ()
    export: str | None = None
    required: bool = True
    allow_sockets: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlainCredential:
    name: str
    via: CredentialVia
    source: str | None = None


@dataclass(frozen=True)
class PlainNetworkRule:
    host: str
    ports: tuple[int, ...]


@dataclass(frozen=True)
class PlainNetwork:
    allow: tuple[PlainNetworkRule, ...] = ()
    hosts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PlainResources:
    wall_s: float
    cpu_s: float
    memory_bytes: int
    pids_max: int
    disk_bytes: int
    output_bytes: int
    open_files_max: int
    cpu_cores: float


@dataclass(frozen=True)
class PlainHardening:
    landlock: LayerRequirement
    cgroups: LayerRequirement


@dataclass(frozen=True)
class PlainContainerRuntime:
    runtime: str
    image: str | None


@dataclass(frozen=True)
class PlainMicrovmRuntime:
    accel: str


@dataclass(frozen=True)
class PlainRuntime:
    backend: Backend
    container: PlainContainerRuntime
    microvm: PlainMicrovmRuntime


@dataclass(frozen=True)
class PlainRecordRule:
    name: str
    via: str
    actions: tuple[str, ...]


@dataclass(frozen=True)
class PlainBoundary:
    task: str
    principal: str | None
    threats: tuple[Threat, ...]
    files: tuple[PlainFileRule, ...]
    credentials: tuple[PlainCredential, ...]
    network: PlainNetwork
    resources: PlainResources
    env: Mapping[str, str]
    records: tuple[PlainRecordRule, ...]
    hardening: PlainHardening
    runtime: PlainRuntime

    @property
    def allows_network(self) -> bool:
        """True when any destination is allowed (egress needed); as ``Boundary.allows_network``."""
        return bool(self.network.allow)


def plain_boundary(boundary: Boundary) -> PlainBoundary:
    """The plain copy of a validated ``Boundary``."""
    return plain_from_json(boundary.model_dump(mode="json"))


def plain_from_json(data: Mapping[str, Any]) -> PlainBoundary:
    """Rebuild a ``PlainBoundary`` from ``Boundary.model_dump(mode="json")``.

    The input must come from a boundary that passed validation: this checks structure and
    types (so a damaged cache entry is refused), not the manifest's rules.

    Raises:
        ValueError: a key is missing or unknown, or a value has the wrong type.
    """
    body = {k: v for k, v in _mapping(data, "boundary").items() if k not in NOT_MIRRORED}
    return _build(
        PlainBoundary,
        body,
        "boundary",
        task=_str,
        principal=_optional(_str),
        threats=_tuple_of(Threat),
        files=_tuple_of(lambda v: _build(PlainFileRule, v, "files", **_FILE)),
        credentials=_tuple_of(lambda v: _build(PlainCredential, v, "credentials", **_CREDENTIAL)),
        network=lambda v: _build(
            PlainNetwork,
            v,
            "network",
            allow=_tuple_of(lambda v: _build(PlainNetworkRule, v, "network.allow", host=_str, ports=_tuple_of(_int))),
            hosts=_str_map,
        ),
        resources=lambda v: _build(PlainResources, v, "resources", **_RESOURCES),
        env=_str_map,
        records=_tuple_of(
            lambda v: _build(PlainRecordRule, v, "records", name=_str, via=_str, actions=_tuple_of(_str))
        ),
        hardening=lambda v: _build(PlainHardening, v, "hardening", landlock=LayerRequirement, cgroups=LayerRequirement),
        runtime=lambda v: _build(
            PlainRuntime,
            v,
            "runtime",
            backend=Backend,
            container=lambda c: _build(
                PlainContainerRuntime, c, "runtime.container", runtime=_str, image=_optional(_str)
            ),
            microvm=lambda m: _build(PlainMicrovmRuntime, m, "runtime.microvm", accel=_str),
        ),
    )


# -- strict converters ------------------------------------------------------------------------------

T = TypeVar("T")


def _build(cls: Callable[..., T], value: Any, where: str, **convert: Callable[[Any], Any]) -> T:
    data = _mapping(value, where)
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    if set(convert) != names:  # a converter per field, so this module cannot drift silently either
        raise AssertionError(f"plain {where}: converters {sorted(convert)} != fields {sorted(names)}")
    if set(data) != names:
        missing, unknown = sorted(names - set(data)), sorted(set(data) - names)
        raise ValueError(f"{where}: missing keys {missing}, unknown keys {unknown}")
    try:
        return cls(**{name: convert[name](data[name]) for name in names})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected an object")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    return value


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {type(value).__name__}")
    return float(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {type(value).__name__}")
    return value


def _optional(convert: Callable[[Any], T]) -> Callable[[Any], T | None]:
    return lambda value: None if value is None else convert(value)


def _tuple_of(convert: Callable[[Any], T]) -> Callable[[Any], tuple[T, ...]]:
    def run(value: Any) -> tuple[T, ...]:
        if not isinstance(value, list | tuple):
            raise ValueError(f"expected a list, got {type(value).__name__}")
        return tuple(convert(item) for item in value)

    return run


def _str_map(value: Any) -> dict[str, str]:
    return {_str(k): _str(v) for k, v in _mapping(value, "map").items()}


_FILE: dict[str, Callable[[Any], Any]] = {
    "path": _str,
    "access": FileAccess,
    "host": _optional(_str),
    "protect": _tuple_of(_str),
    "export": _optional(_str),
    "required": _bool,
    "allow_sockets": _tuple_of(_str),
}
_CREDENTIAL: dict[str, Callable[[Any], Any]] = {"name": _str, "via": CredentialVia, "source": _optional(_str)}
_RESOURCES: dict[str, Callable[[Any], Any]] = {
    "wall_s": _float,
    "cpu_s": _float,
    "memory_bytes": _int,
    "pids_max": _int,
    "disk_bytes": _int,
    "output_bytes": _int,
    "open_files_max": _int,
    "cpu_cores": _float,
}
