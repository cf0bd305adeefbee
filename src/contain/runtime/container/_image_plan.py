"""Planning one member of an untrusted image layer: a pure function from facts to an ``Action``.

An image layer is a tar stream written by whoever built the image. ``plan_member`` looks at one
member (``MemberFacts``, read from its tar header), at the image tree built so far (``ImageTree``,
an in-memory model of what earlier members created) and at the limits, and returns what to do:
extract it (possibly changed), apply a whiteout, skip it, or refuse the whole image. It performs
no I/O; ``_image_apply`` carries the action out, walking with ``O_NOFOLLOW`` directory descriptors
as a second, independent check.

Every protecting rule is one row of ``MEMBER_RULES`` with its outcome and reason. Outcomes:

* ``REFUSE_IMAGE``: the image is refused and nothing is cached. Chosen for every escape attempt
  (absolute names, ``..``, writing through a symlink, hard links out of the image) and for
  everything a container runtime should never get from an image (device nodes, FIFOs), because a
  skipped member leaves an image whose author meant something else, and a quiet partial rootfs
  is the surprise a reviewer does not want. The error lists every offending member of the layer.
* ``SKIP_MEMBER``: the member is not written, the image is still accepted (the image root's own
  entry, AUFS metadata, a whiteout of an entry of the same layer).
* ``CHANGE_MEMBER``: the member is written with a change (set-uid/set-gid/sticky bits stripped,
  extended attributes such as file capabilities dropped, tar owner ignored).

Every finding, of any outcome, is reported (``UnpackReport``) with the member's name.

Does not: look at file contents (malware, secrets), check signatures, or preserve owners, xattrs
or write bits (the cache is read-only and owned by the unpacking user; see docs/images.md).
"""

from __future__ import annotations

import enum
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "MEMBER_RULES",
    "Action",
    "Finding",
    "ImageTree",
    "MemberFacts",
    "MemberKind",
    "MemberRule",
    "Outcome",
    "UnpackLimits",
    "Usage",
    "Verdict",
    "plan_member",
]

WHITEOUT_PREFIX = ".wh."  # OCI image-spec layer.md, "Whiteouts"
OPAQUE_MARKER = ".wh..wh..opq"  # OCI image-spec layer.md, "Opaque Whiteout"
RESERVED_PREFIX = ".wh..wh."  # AUFS metadata (.wh..wh.plnk, .wh..wh.aufs); not whiteouts
SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX
CAPABILITY_XATTR = "security.capability"


class MemberKind(enum.Enum):
    """What a tar member creates."""

    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    HARDLINK = "hardlink"
    CHAR_DEVICE = "char-device"
    BLOCK_DEVICE = "block-device"
    FIFO = "fifo"
    OTHER = "other"


class Outcome(enum.Enum):
    """What a rule row does to its member when it applies."""

    REFUSE_IMAGE = "refuse-image"
    SKIP_MEMBER = "skip-member"
    CHANGE_MEMBER = "change-member"


class Verdict(enum.Enum):
    """What the apply step does with one member."""

    EXTRACT = "extract"
    WHITEOUT = "whiteout"  # remove path (an entry of a lower layer)
    OPAQUE = "opaque"  # remove path's children that this layer did not create
    SKIP = "skip"
    REFUSE = "refuse"


@dataclass(frozen=True)
class UnpackLimits:
    """Bounds on what one image may make the host do. Defaults fit large real images.

    ``max_total_bytes`` counts regular files by their *apparent* size, so a GNU sparse member of
    1 TiB counts as 1 TiB and is refused before anything is written.
    """

    max_total_bytes: int = 16 * 1024**3
    max_entries: int = 500_000
    max_layers: int = 128
    max_path_bytes: int = 4096  # PATH_MAX on Linux, include/uapi/linux/limits.h
    max_component_bytes: int = 255  # NAME_MAX on Linux
    max_depth: int = 256  # deep node_modules trees reach ~60; 256 keeps per-member walks bounded
    max_link_target_bytes: int = 4096  # PATH_MAX: the kernel refuses longer symlink targets anyway
    max_json_bytes: int = 4 * 1024**2  # manifests, indexes and configs are a few KiB
    header_bytes_per_entry: int = 16 * 1024  # tar headers + pax/longname records allowed per entry

    @property
    def max_layer_stream_bytes(self) -> int:
        """The most uncompressed bytes one layer may produce (decompression-bomb bound)."""
        return self.max_total_bytes + self.max_entries * self.header_bytes_per_entry


@dataclass(frozen=True)
class Usage:
    """What the image consumed so far, across layers."""

    entries: int = 0
    total_bytes: int = 0


@dataclass(frozen=True)
class MemberFacts:
    """One tar member's header, as read; nothing here has been trusted yet."""

    name: str
    kind: MemberKind
    mode: int = 0o644
    size: int = 0  # apparent size: tarfile reports a GNU sparse member's expanded size here
    linkname: str = ""
    uid: int = 0
    gid: int = 0
    xattrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """One rule that applied to a member."""

    rule_id: str
    outcome: Outcome
    reason: str


@dataclass(frozen=True)
class Action:
    """The plan for one member. ``path`` and ``link_path`` are components under the image root."""

    verdict: Verdict
    kind: MemberKind
    path: tuple[str, ...] = ()
    mode: int = 0
    link_path: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()


# ---------------------------------------------------------------------------------------------
# The image tree model


@dataclass
class _Node:
    kind: MemberKind
    layer: int  # the last layer that created or touched this entry or anything below it
    mode: int = 0o755
    mtime: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


class ImageTree:
    """What earlier members created: kinds, layers and directory modes, with no file system access.

    Hard links are recorded as ``FILE`` (they are the same regular-file inode).
    """

    def __init__(self) -> None:
        self.root = _Node(MemberKind.DIRECTORY, layer=-1, mode=0o755)

    def _node(self, parts: tuple[str, ...]) -> _Node | None:
        node = self.root
        for name in parts:
            if node.kind is not MemberKind.DIRECTORY:
                return None
            child = node.children.get(name)
            if child is None:
                return None
            node = child
        return node

    def kind_at(self, parts: tuple[str, ...]) -> MemberKind | None:
        """The kind of the entry at ``parts``, or None when absent or below a non-directory."""
        node = self._node(parts)
        return None if node is None else node.kind

    def layer_at(self, parts: tuple[str, ...]) -> int | None:
        node = self._node(parts)
        return None if node is None else node.layer

    def obstacle(self, parents: tuple[str, ...]) -> tuple[str, MemberKind] | None:
        """The first existing prefix of ``parents`` that is not a directory, with its kind."""
        node = self.root
        for depth, name in enumerate(parents):
            child = node.children.get(name)
            if child is None:
                return None
            if child.kind is not MemberKind.DIRECTORY:
                return "/".join(parents[: depth + 1]), child.kind
            node = child
        return None

    def add(self, parts: tuple[str, ...], kind: MemberKind, *, layer: int, mode: int = 0o755, mtime: int = 0) -> None:
        """Record an entry (replacing what was there); missing parents become directories."""
        node = self.root
        node.layer = layer
        for name in parts[:-1]:
            child = node.children.get(name)
            if child is None or child.kind is not MemberKind.DIRECTORY:
                child = node.children[name] = _Node(MemberKind.DIRECTORY, layer=layer)
            child.layer = layer
            node = child
        existing = node.children.get(parts[-1])
        if kind is MemberKind.DIRECTORY and existing is not None and existing.kind is MemberKind.DIRECTORY:
            existing.layer, existing.mode, existing.mtime = layer, mode, mtime  # a directory merges
            return
        node.children[parts[-1]] = _Node(kind, layer=layer, mode=mode, mtime=mtime)

    def ensure_directory(self, parts: tuple[str, ...], *, layer: int) -> None:
        """Record ``parts`` and its parents as directories touched by ``layer`` (keeping modes)."""
        node = self.root
        node.layer = layer
        for name in parts:
            child = node.children.get(name)
            if child is None or child.kind is not MemberKind.DIRECTORY:
                child = node.children[name] = _Node(MemberKind.DIRECTORY, layer=layer)
            child.layer = layer
            node = child

    def remove(self, parts: tuple[str, ...]) -> None:
        parent = self._node(parts[:-1])
        if parent is not None:
            parent.children.pop(parts[-1], None)

    def opaque_removals(self, parts: tuple[str, ...], *, layer: int) -> list[tuple[str, ...]]:
        """Entries below ``parts`` that an opaque marker of ``layer`` hides: everything this layer
        did not create or touch (OCI: an opaque whiteout hides the lower layers' children only)."""
        node = self._node(parts)
        if node is None or node.kind is not MemberKind.DIRECTORY:
            return []
        hidden: list[tuple[str, ...]] = []
        for name, child in node.children.items():
            if child.layer != layer:
                hidden.append((*parts, name))
            elif child.kind is MemberKind.DIRECTORY:
                hidden.extend(self.opaque_removals((*parts, name), layer=layer))
        return hidden

    def directories(self) -> Iterator[tuple[tuple[str, ...], int, int]]:
        """Every directory (path, mode, mtime), children before their parent."""

        def walk(parts: tuple[str, ...], node: _Node) -> Iterator[tuple[tuple[str, ...], int, int]]:
            for name, child in node.children.items():
                if child.kind is MemberKind.DIRECTORY:
                    yield from walk((*parts, name), child)
            yield parts, node.mode, node.mtime

        return walk((), self.root)


# ---------------------------------------------------------------------------------------------
# Facts derived from a member before the rules run


@dataclass(frozen=True)
class Context:
    """A member plus everything the rules may consult. Built by ``plan_member``."""

    facts: MemberFacts
    parts: tuple[str, ...]  # components after dropping empty and "." ones
    tree: ImageTree
    limits: UnpackLimits
    usage: Usage
    layer: int

    @property
    def basename(self) -> str:
        return self.parts[-1] if self.parts else ""

    @property
    def is_whiteout(self) -> bool:
        return self.basename.startswith(WHITEOUT_PREFIX)

    @property
    def is_opaque(self) -> bool:
        return self.basename == OPAQUE_MARKER

    @property
    def target(self) -> tuple[str, ...]:
        """The path this member acts on: the whiteout's target, the opaque directory, or itself."""
        if self.is_opaque:
            return self.parts[:-1]
        if self.is_whiteout:
            return (*self.parts[:-1], self.basename[len(WHITEOUT_PREFIX) :])
        return self.parts

    @property
    def must_be_directories(self) -> tuple[str, ...]:
        """Components that the apply step must walk as (or create as) directories."""
        return self.target if self.is_opaque else self.target[:-1]


def split_name(name: str) -> tuple[str, ...]:
    """Components of a member name without empty or "." components (``./a//b`` is ``a/b``)."""
    return tuple(part for part in name.split("/") if part not in ("", "."))


def _fs_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


# ---------------------------------------------------------------------------------------------
# The rules: each returns the detail of why it applies, or None


def _absolute(c: Context) -> str | None:
    return f"absolute name {c.facts.name!r}" if c.facts.name.startswith("/") else None


def _dotdot(c: Context) -> str | None:
    return "'..' component" if ".." in c.facts.name.split("/") else None


def _nul(c: Context) -> str | None:
    return "NUL byte in the name or link target" if "\x00" in c.facts.name + c.facts.linkname else None


def _path_length(c: Context) -> str | None:
    if _fs_bytes(c.facts.name) > c.limits.max_path_bytes:
        return f"name is {_fs_bytes(c.facts.name)} bytes, over {c.limits.max_path_bytes}"
    long = next((p for p in c.parts if _fs_bytes(p) > c.limits.max_component_bytes), None)
    return None if long is None else f"a component is {_fs_bytes(long)} bytes, over {c.limits.max_component_bytes}"


def _depth(c: Context) -> str | None:
    return f"{len(c.parts)} components, over {c.limits.max_depth}" if len(c.parts) > c.limits.max_depth else None


def _escapes(c: Context) -> bool:
    return _absolute(c) is not None or _dotdot(c) is not None or _nul(c) is not None


def _through_symlink(c: Context) -> str | None:
    if _escapes(c):
        return None
    found = c.tree.obstacle(c.must_be_directories)
    if found is None or found[1] is not MemberKind.SYMLINK:
        return None
    return f"{found[0]!r} is a symlink in this image; writing below it would follow it"


def _non_directory_parent(c: Context) -> str | None:
    if _escapes(c):
        return None
    found = c.tree.obstacle(c.must_be_directories)
    if found is None or found[1] is MemberKind.SYMLINK:
        return None
    return f"{found[0]!r} is a {found[1].value}, not a directory"


def _link_parts(c: Context) -> tuple[str, ...]:
    return split_name(c.facts.linkname)


def _hardlink_outside(c: Context) -> str | None:
    if c.facts.kind is not MemberKind.HARDLINK:
        return None
    link = c.facts.linkname
    if link.startswith("/") or ".." in link.split("/") or not _link_parts(c):
        return f"hard link target {link!r} is outside the image root"
    return None


def _hardlink_not_file(c: Context) -> str | None:
    if c.facts.kind is not MemberKind.HARDLINK or _hardlink_outside(c) is not None:
        return None
    kind = c.tree.kind_at(_link_parts(c))
    if kind is MemberKind.FILE:
        return None
    what = "absent" if kind is None else f"a {kind.value}"
    return f"hard link target {c.facts.linkname!r} is {what}, not a regular file extracted from this image"


def _hardlink_self(c: Context) -> str | None:
    is_self = c.facts.kind is MemberKind.HARDLINK and _link_parts(c) == c.parts
    return "hard link to itself" if is_self and _hardlink_not_file(c) is None else None


def _kind_is(*kinds: MemberKind) -> Callable[[Context], str | None]:
    def check(c: Context) -> str | None:
        return f"member is a {c.facts.kind.value}" if c.facts.kind in kinds else None

    return check


def _symlink_target(c: Context) -> str | None:
    if c.facts.kind is not MemberKind.SYMLINK:
        return None
    if not c.facts.linkname:
        return "symlink with an empty target"
    size = _fs_bytes(c.facts.linkname)
    return (
        f"symlink target is {size} bytes, over {c.limits.max_link_target_bytes}"
        if (size > c.limits.max_link_target_bytes)
        else None
    )


def _entries(c: Context) -> str | None:
    if c.usage.entries + 1 > c.limits.max_entries:
        return f"more than {c.limits.max_entries} entries"
    return None


def _bytes(c: Context) -> str | None:
    if c.facts.kind is not MemberKind.FILE:
        return None
    if c.facts.size < 0 or c.usage.total_bytes + c.facts.size > c.limits.max_total_bytes:
        return (
            f"{c.facts.size} bytes (apparent size) after {c.usage.total_bytes} would pass the "
            f"{c.limits.max_total_bytes}-byte budget"
        )
    return None


def _image_root(c: Context) -> str | None:
    return "the image root's own entry; the cache sets the root's mode" if not c.parts and not _escapes(c) else None


def _reserved(c: Context) -> str | None:
    if c.basename.startswith(RESERVED_PREFIX) and not c.is_opaque:
        return f"{c.basename!r} is AUFS metadata, not a file of the image"
    return None


def _whiteout_name(c: Context) -> str | None:
    if not c.is_whiteout or c.is_opaque or c.basename.startswith(RESERVED_PREFIX):
        return None
    hidden = c.basename[len(WHITEOUT_PREFIX) :]
    return f"whiteout of {hidden!r} names no entry" if hidden in ("", ".", "..") else None


def _whiteout_same_layer(c: Context) -> str | None:
    if not c.is_whiteout or c.is_opaque or _whiteout_name(c) is not None or _reserved(c) is not None:
        return None
    if c.tree.layer_at(c.target) == c.layer:
        return "whiteouts hide entries of lower layers only (OCI layer.md); this entry is from the same layer"
    return None


def _set_id(c: Context) -> str | None:
    if c.facts.kind is MemberKind.DIRECTORY or c.is_whiteout:
        return None
    bits = [n for bit, n in ((stat.S_ISUID, "set-uid"), (stat.S_ISGID, "set-gid")) if c.facts.mode & bit]
    return f"{' and '.join(bits)} bit stripped" if bits else None


def _sticky_file(c: Context) -> str | None:
    if c.facts.kind is MemberKind.DIRECTORY or c.is_whiteout or not c.facts.mode & stat.S_ISVTX:
        return None
    return "sticky bit on a non-directory stripped"


def _capability(c: Context) -> str | None:
    return "security.capability xattr dropped" if CAPABILITY_XATTR in c.facts.xattrs else None


def _xattrs(c: Context) -> str | None:
    other = sorted(x for x in c.facts.xattrs if x != CAPABILITY_XATTR)
    return f"extended attributes dropped: {', '.join(other)}" if other else None


def _owner(c: Context) -> str | None:
    if (c.facts.uid, c.facts.gid) == (0, 0) or c.is_whiteout:
        return None
    return f"owner {c.facts.uid}:{c.facts.gid} ignored; the cache is owned by the unpacking user"


@dataclass(frozen=True)
class MemberRule:
    """One protecting rule: when ``check`` returns a detail, ``outcome`` applies, for ``reason``."""

    rule_id: str
    outcome: Outcome
    check: Callable[[Context], str | None]
    reason: str


_R, _S, _C = Outcome.REFUSE_IMAGE, Outcome.SKIP_MEMBER, Outcome.CHANGE_MEMBER

MEMBER_RULES: tuple[MemberRule, ...] = (
    MemberRule("absolute-name", _R, _absolute, "a naive extractor writes it at that host path"),
    MemberRule("dotdot-component", _R, _dotdot, "'..' climbs out of the image root in a naive extractor"),
    MemberRule("nul-in-name", _R, _nul, "the kernel cuts the name at NUL: what is written differs from what was read"),
    MemberRule("path-too-long", _R, _path_length, "past PATH_MAX/NAME_MAX the kernel refuses it halfway"),
    MemberRule("path-too-deep", _R, _depth, "each member walks its path one descriptor per component"),
    MemberRule("through-symlink", _R, _through_symlink, "a write below a symlink lands wherever it points"),
    MemberRule("non-directory-parent", _R, _non_directory_parent, "tar cannot create entries below a file"),
    MemberRule("hardlink-outside-root", _R, _hardlink_outside, "a hard link to a host file exposes or alters it"),
    MemberRule(
        "hardlink-not-regular-file",
        _R,
        _hardlink_not_file,
        "only regular files this image extracted may be linked; a link to a symlink or to nothing is a trick",
    ),
    MemberRule("device-node", _R, _kind_is(MemberKind.CHAR_DEVICE, MemberKind.BLOCK_DEVICE), "gives raw device access"),
    MemberRule(
        "fifo",
        _R,
        _kind_is(MemberKind.FIFO),
        "a host-side reader of the cached rootfs (user lookup in etc/passwd) would block on it forever",
    ),
    MemberRule("unknown-type", _R, _kind_is(MemberKind.OTHER), "an unknown member type has no safe meaning"),
    MemberRule("symlink-target", _R, _symlink_target, "the kernel refuses such targets; fail before writing"),
    MemberRule("entry-budget", _R, _entries, "bounds inodes and time spent on one image"),
    MemberRule("byte-budget", _R, _bytes, "bounds disk use before a byte is written; sparse members count in full"),
    MemberRule("whiteout-names-nothing", _R, _whiteout_name, "'.wh..' would hide the directory itself or its parent"),
    MemberRule("image-root-entry", _S, _image_root, "the root's mode and owner are the cache's"),
    MemberRule("aufs-metadata", _S, _reserved, "AUFS bookkeeping files are not part of the image's content"),
    MemberRule("whiteout-same-layer", _S, _whiteout_same_layer, "OCI: whiteouts never hide their own layer"),
    MemberRule("hardlink-to-itself", _S, _hardlink_self, "the entry already is that file; relinking would delete it"),
    MemberRule("set-id-bits", _C, _set_id, "set-uid/set-gid binaries from an untrusted image raise privileges"),
    MemberRule("sticky-file", _C, _sticky_file, "the sticky bit means nothing on files and is not needed"),
    MemberRule("file-capability", _C, _capability, "file capabilities raise privileges like set-uid"),
    MemberRule("xattrs-dropped", _C, _xattrs, "xattrs can carry security labels and ACLs; none are applied"),
    MemberRule("owner-ignored", _C, _owner, "the cache belongs to the unpacking user; ids are mapped at run time"),
)


_ORDER = (Outcome.REFUSE_IMAGE, Outcome.SKIP_MEMBER)


def plan_member(facts: MemberFacts, *, tree: ImageTree, limits: UnpackLimits, usage: Usage, layer: int) -> Action:
    """Decide what to do with one member of layer ``layer`` (0 is the lowest).

    Every rule of ``MEMBER_RULES`` is evaluated; the strongest outcome wins (refuse the image,
    then skip the member, then extract with changes), and every finding is returned.

    Args:
        facts: the member's header.
        tree: the image as earlier members left it.
        limits: budgets and bounds.
        usage: entries and bytes consumed before this member.
        layer: this member's layer index.

    Returns:
        The action; ``findings`` lists every rule that applied, in table order.
    """
    context = Context(facts, split_name(facts.name), tree, limits, usage, layer)
    findings = []
    for rule in MEMBER_RULES:
        detail = rule.check(context)
        if detail is not None:
            findings.append(Finding(rule.rule_id, rule.outcome, f"{detail}: {rule.reason}"))
    outcomes = {f.outcome for f in findings}
    for outcome, verdict in zip(_ORDER, (Verdict.REFUSE, Verdict.SKIP), strict=True):
        if outcome in outcomes:
            return Action(verdict, facts.kind, context.parts, findings=tuple(findings))
    if context.is_opaque:
        return Action(Verdict.OPAQUE, facts.kind, context.target, findings=tuple(findings))
    if context.is_whiteout:
        return Action(Verdict.WHITEOUT, facts.kind, context.target, findings=tuple(findings))
    mode = stat.S_IMODE(facts.mode) & ~(0 if facts.kind is MemberKind.DIRECTORY else SPECIAL_BITS)
    link = _link_parts(context) if facts.kind is MemberKind.HARDLINK else ()
    return Action(Verdict.EXTRACT, facts.kind, context.parts, mode=mode, link_path=link, findings=tuple(findings))
