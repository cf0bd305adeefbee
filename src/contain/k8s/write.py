"""Writing a ``K8sRender``: files in a directory, or one YAML stream; the thin apply step.

Files are written through a directory descriptor opened with ``O_NOFOLLOW``: each file goes to a
fresh temporary name (``O_CREAT | O_EXCL | O_NOFOLLOW``) and is renamed over its final name, so a
symlink planted at an output name is replaced, never followed, and a reader never sees half a
file. The output directory itself may be created; an existing path that is a symlink or not a
directory is refused.

What this does not do: remove files an earlier render left in the directory (a render for another
task writes other names), or fsync (the files are a plan to review and apply, not a ledger).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import yaml

from contain.errors import RenderRefused
from contain.k8s.render import K8sRender

__all__ = ["render_yaml_stream", "write_render"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _dump(body: object) -> str:
    return yaml.safe_dump(body, sort_keys=False, default_flow_style=False, allow_unicode=False)


def render_yaml_stream(render: K8sRender) -> str:
    """Every object as one multi-document YAML stream, in apply order.

    Raises:
        RenderRefused: the render has node files (a Localhost seccomp profile), which a stream
            of API objects cannot carry.
    """
    if render.files:
        raise RenderRefused(
            f"the render includes {render.files[0].relative_path}, a node file that is not an API object",
            "write to a directory with -o DIR, or use --seccomp runtime-default",
            rule_id="k8s.output",
        )
    return "".join("---\n" + _dump(obj.body) for obj in render.objects)


def _open_dir(parent_fd: int, name: str) -> int:
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        raise RenderRefused(
            f"output directory {name!r} cannot be opened as a directory ({exc.strerror})",
            "name a directory that is not a symlink, or a path that does not exist yet",
            rule_id="k8s.output",
        ) from exc


def _write_file(dir_fd: int, name: str, text: str) -> None:
    temporary = f".{name}.tmp-{os.getpid()}"
    fd = os.open(temporary, _FILE_FLAGS, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def write_render(render: K8sRender, out_dir: str | os.PathLike[str]) -> list[str]:
    """Write every object and node file under ``out_dir``; returns the relative paths written.

    Raises:
        RenderRefused: the directory (or ``seccomp/`` inside it) is a symlink or not a directory,
            or a file cannot be written.
    """
    target = Path(os.path.abspath(out_dir))
    try:
        parent = os.open(target.parent, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the caller's own path, as given
    except OSError as exc:
        raise RenderRefused(
            f"the parent of output directory {str(target)!r} cannot be opened ({exc.strerror})",
            "create the parent directory first",
            rule_id="k8s.output",
        ) from exc
    written: list[str] = []
    try:
        root = _open_dir(parent, target.name)
        try:
            for obj in render.objects:
                _write_file(root, obj.file_name, _dump(obj.body))
                written.append(obj.file_name)
            for node_file in render.files:
                sub, name = node_file.relative_path.split("/", 1)
                sub_fd = _open_dir(root, sub)
                try:
                    _write_file(sub_fd, name, node_file.text)
                finally:
                    os.close(sub_fd)
                written.append(node_file.relative_path)
        except OSError as exc:
            raise RenderRefused(
                f"writing the render into {str(target)!r} failed: {exc}", "check the directory's permissions"
            ) from exc
        finally:
            os.close(root)
    finally:
        os.close(parent)
    return written
