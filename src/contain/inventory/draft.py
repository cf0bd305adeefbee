"""``contain inventory --draft-manifest``: a boundary proposed from an inventory.

The draft is the narrowest boundary that still lets the task see its working tree:

* ``threats: [generated_code]`` — the inventory cannot know the task; generated code is the
  threat every agent task carries. Add the others by hand.
* the working directory as a **read** bind at ``/work/<name>``, with a ``block`` rule for every
  ``.env*`` file inside it; plus a ``scratch`` ``/work/out``. Nothing is writable on the host. The
  working directory is not bound at all when it is the home directory or ``/``.
* every secret-looking variable as ``credentials: [{name, via: broker}]`` — never ``via: env``.
* ``network: {allow: []}`` — no network; the destinations found are listed as comments.
* every other item as a comment with its verdict and reason, so the reviewer sees what was kept
  out and why.

The text is generated line by line (scalars quoted as JSON, which YAML reads as double-quoted
strings) so the comments sit next to the rule they explain, and then validated with the same
``boundary_from_mapping`` that ``contain check-manifest`` and ``contain run`` use; a draft that
does not validate raises instead of being written.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml

from contain.boundary import Resources, boundary_from_mapping
from contain.errors import FileTransferError
from contain.inventory.collect import Inventory
from contain.inventory.items import Group, InventoryItem

__all__ = ["draft_manifest", "write_draft_manifest"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCRATCH = "/work/out"


def draft_manifest(inventory: Inventory) -> str:
    """The draft boundary as YAML text with comments; pure.

    Raises:
        BoundaryInvalid: the draft does not validate (a bug in this module; fail closed).
    """
    lines = [
        f"# Draft boundary from `contain inventory` for {_comment(str(inventory.cwd))}.",
        "# Review every line; run `contain check` on it. Everything not listed is denied.",
        "version: 1",
        f"task: {json.dumps(_task_name(inventory.cwd))}",
        "threats: [generated_code]  # add untrusted_documents / trusted_api if they apply",
        *_files_section(inventory),
        *_credentials_section(inventory),
        *_network_section(inventory),
        *_resources_section(),
        *_kept_out_comments(inventory),
    ]
    text = "\n".join(lines) + "\n"
    boundary_from_mapping(yaml.safe_load(text), source="<draft manifest>", base_dir=Path("/"))
    return text


def write_draft_manifest(path: Path, text: str, *, force: bool) -> None:
    """Write the draft; never overwrite an existing file unless ``force``.

    The text goes to a temporary file in the same directory and is linked into place (without
    ``force``: fails if the name appeared meanwhile) or renamed over it (with ``force``; a
    symlink at ``path`` is replaced, not followed).

    Raises:
        FileTransferError: the file exists and ``force`` is false, or writing failed.
    """
    if os.path.lexists(path) and not force:
        raise FileTransferError(
            f"refusing to overwrite existing {path}", "pass --force, or choose another --draft-manifest path"
        )
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        if force:
            os.replace(temporary, path)
        else:
            os.link(temporary, path)
    except FileExistsError as exc:
        raise FileTransferError(
            f"refusing to overwrite existing {path}", "pass --force, or choose another --draft-manifest path"
        ) from exc
    except OSError as exc:
        raise FileTransferError(
            f"cannot write {path}: {exc.strerror}", "check the directory exists and is writable"
        ) from exc
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def _task_name(cwd: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", cwd.name)[:64].lstrip("-_.")
    return name or "task"


def _sandbox_name(cwd: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", cwd.name).lstrip(".-") or "project"
    return "project" if f"/work/{name}" == _SCRATCH else name


def _files_section(inventory: Inventory) -> list[str]:
    cwd = inventory.cwd
    lines = ["files:"]
    if cwd == inventory.home or cwd == Path("/") or not _encodable(str(cwd)):
        lines.append(
            f"  # {_comment(str(cwd))} is not bound: it is the home directory or /, or "
            "not UTF-8; bind the project directory by hand"
        )
    else:
        bind = f"/work/{_sandbox_name(cwd)}"
        lines.append("  # the working tree, read-only (inventory verdict: read)")
        lines.append(f"  - {{path: {json.dumps(bind)}, access: read, host: {json.dumps(str(cwd))}}}")
        for item in inventory.in_group(Group.CREDENTIALS):
            if item.kind != "dotenv":
                continue
            location = Path(item.location)
            if cwd not in location.parents or not _encodable(item.location):
                continue
            inner = f"{bind}/{location.relative_to(cwd).as_posix()}"
            lines.append(f"  # {_comment(item.reason)}")
            lines.append(f"  - {{path: {json.dumps(inner)}, access: block}}")
    lines.append("  # the task's output; add `export: ./out` to copy it back after the run")
    lines.append(f"  - {{path: {json.dumps(_SCRATCH)}, access: scratch}}")
    return lines


def _credentials_section(inventory: Inventory) -> list[str]:
    entries: list[str] = []
    for item in inventory.in_group(Group.CREDENTIALS):
        name = item.location.removeprefix("$")
        if item.kind != "env-secret" or not _ENV_NAME.match(name):
            continue
        entries.append(f"  # {name} [{item.fingerprint}]: used by broker actions only, never inside the sandbox")
        entries.append(f"  - {{name: {json.dumps(name)}, via: broker}}")
    return ["credentials:", *entries] if entries else ["credentials: []"]


def _network_section(inventory: Inventory) -> list[str]:
    lines = ["network:", "  allow: []  # no network; add exact hosts the task needs"]
    for item in inventory.in_group(Group.NETWORK):
        lines.append(f"  # {item.verdict.value}: {item.kind} {_comment(item.location)}")
    return lines


def _resources_section() -> list[str]:
    limits = Resources()
    return [
        "# defaults; size them for the task",
        "resources:",
        f"  wall_s: {limits.wall_s:g}",
        f"  cpu_s: {limits.cpu_s:g}",
        f"  memory_bytes: {limits.memory_bytes}",
        f"  pids_max: {limits.pids_max}",
        f"  disk_bytes: {limits.disk_bytes}",
    ]


def _kept_out_comments(inventory: Inventory) -> list[str]:
    lines = ["", "# Also found and kept out (not visible in the sandbox unless listed above):"]
    for item in inventory.items:
        if item.group is Group.NETWORK or item.kind in ("env-secret",):
            continue
        if item.group is Group.FILES and item.kind == "working-tree":
            continue
        lines.append(
            f"#   {item.verdict.value:<6} {item.group.value}/{item.kind} "
            f"{_comment(item.location)}: {_comment(_first_clause(item))}"
        )
    return lines


def _first_clause(item: InventoryItem) -> str:
    return item.reason.split(";", 1)[0]


def _comment(text: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
