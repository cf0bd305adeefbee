"""Reading a manifest from YAML (or JSON), with errors that name the file, key path and line.

The bytes go through ``contain.boundary.documents`` (bounded size, depth and numbers; no
duplicate keys, anchors, aliases, merge keys or dates), then through the pydantic model; every
failure on the way is a ``BoundaryInvalid``, never a raw exception.

Host paths in a manifest are relative to the manifest's directory; they are made absolute here so
the rest of contain never depends on the caller's working directory. Whether they exist is a host
fact, checked when a sandbox is planned.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from contain.boundary.documents import MAX_DOCUMENT_BYTES, read_config_document
from contain.boundary.model import Boundary
from contain.errors import BoundaryInvalid

if TYPE_CHECKING:
    import yaml

__all__ = ["boundary_from_mapping", "boundary_json_schema", "load_boundary"]

MAX_MANIFEST_BYTES = MAX_DOCUMENT_BYTES


def load_boundary(path: str | os.PathLike[str]) -> Boundary:
    """Read, parse and validate a manifest file.

    Args:
        path: the YAML (or JSON) manifest.

    Returns:
        The validated ``Boundary`` with host paths made absolute against the manifest's folder.

    Raises:
        BoundaryInvalid: unreadable, oversize, not YAML, refused by the strict reader
            (``contain.boundary.documents``: duplicate keys, anchors, aliases, merge keys, deep
            nesting, huge numbers), or failing validation; every problem names the file and line.
    """
    manifest = Path(path)
    document = read_config_document(manifest, what="manifest")
    data = {} if document.data is None else document.data
    if not isinstance(data, dict):
        raise BoundaryInvalid(f"{manifest}: the top level must be a mapping of keys", "start with `version: 1`")
    node = document.node
    return boundary_from_mapping(data, source=str(manifest), base_dir=manifest.parent.resolve(), node=node)


def boundary_from_mapping(
    data: Mapping[str, Any],
    *,
    source: str = "<manifest>",
    base_dir: Path | None = None,
    node: yaml.Node | None = None,
) -> Boundary:
    """Validate an already-parsed manifest mapping.

    Raises:
        BoundaryInvalid: with one problem line per validation error; any other error a validator
            lets out (a bug) is refused as ``BoundaryInvalid`` too, never passed on raw.
    """
    data = _absolute_host_paths(dict(data), base_dir or Path.cwd())
    try:
        return Boundary.model_validate(data)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        if isinstance(exc, ValidationError):
            raise _invalid(exc, source, node) from exc
        # A validator that let a foreign error out is a bug, but the manifest is still refused.
        raise BoundaryInvalid(
            f"{source}: the boundary manifest could not be validated: {type(exc).__name__}: {str(exc)[:200]}",
            "simplify the value named in the message; report this as a bug in contain",
        ) from exc


def _invalid(exc: ValidationError, source: str, node: yaml.Node | None) -> BoundaryInvalid:
    problems = [_describe(error, source, node) for error in exc.errors()]
    return BoundaryInvalid(
        f"{source}: {len(problems)} problem(s) in the boundary manifest:\n  " + "\n  ".join(problems),
        "correct the keys named above; `contain schema` prints every allowed key",
        problems=problems,
    )


def boundary_json_schema() -> dict[str, Any]:
    """The JSON Schema of the manifest, for editors and `contain schema`."""
    schema = Boundary.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "contain boundary manifest"
    return schema


def _absolute_host_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    runtime = data.get("runtime")
    container = runtime.get("container") if isinstance(runtime, dict) else None
    if isinstance(runtime, dict) and isinstance(container, dict):
        image = container.get("image")
        if isinstance(image, str) and image and "\x00" not in image:  # relative to the manifest, as files[].host
            data["runtime"] = {**runtime, "container": {**container, "image": os.path.normpath(base / image)}}
    files = data.get("files")
    if not isinstance(files, list):
        return data
    fixed = []
    for entry in files:
        if isinstance(entry, dict):
            entry = dict(entry)
            for key in ("host", "export"):
                value = entry.get(key)
                if isinstance(value, str) and value and "\x00" not in value:
                    entry[key] = os.path.normpath(base / os.path.expanduser(value))
        fixed.append(entry)
    data["files"] = fixed
    return data


def _describe(error: Any, source: str, node: yaml.Node | None) -> str:
    loc = tuple(error.get("loc", ()))
    # pydantic appends the failing validator's name for tagged unions; keep only real keys.
    key_path = ".".join(str(part) for part in loc) or "(top level)"
    line = _line_of(node, loc)
    where = f"{source}:{line}" if line else source
    message = error.get("msg", "invalid")
    if error.get("type") == "extra_forbidden":
        message = "unknown key; remove it or check its spelling"
    elif error.get("type") == "missing":
        message = "required key is missing"
    message = message.removeprefix("Value error, ")
    got = error.get("input")
    hint = ""
    if error.get("type") not in ("missing", "extra_forbidden") and not isinstance(got, dict | list):
        hint = f" (got {json.dumps(got, default=str)[:80]})"
    return f"{where}: {key_path}: {message}{hint}"


def _line_of(node: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """Find the 1-based line of the deepest YAML node along ``loc``."""
    import yaml

    best: int | None = node.start_mark.line + 1 if node is not None else None
    current = node
    for part in loc:
        if isinstance(current, yaml.MappingNode):
            for key_node, value_node in current.value:
                if key_node.value == str(part):
                    best = key_node.start_mark.line + 1
                    current = value_node
                    break
            else:
                return best
        elif isinstance(current, yaml.SequenceNode) and isinstance(part, int) and part < len(current.value):
            current = current.value[part]
            best = current.start_mark.line + 1
        else:
            return best
    return best
