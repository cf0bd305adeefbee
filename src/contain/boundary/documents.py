"""One bounded, strict reader for every YAML or JSON document a user or a peer hands contain.

Manifests (``contain.yaml``), ``gateway.yaml`` and ``broker.yaml`` are read by
``read_config_document``; the JSON inside capability tokens and grants is read by
``parse_json_document`` and their base64url by ``decode_base64url``. Each input either becomes
plain data (``dict`` with ``str`` keys, ``list``, ``str``, ``int``, ``float``, ``bool``,
``None``) or raises ``UnreadableDocument`` (a ``ValueError``) naming the line, which
``read_config_document`` turns into ``BoundaryInvalid``; no other exception leaves this module,
and no input costs more than a few passes over its bytes.

What is enforced (a fuzzed PyYAML once gave ValueError, OverflowError and RecursionError, and a
1 KB alias bomb took minutes and half a gigabyte):

* Size: at most ``MAX_DOCUMENT_BYTES`` (1 MiB) per file, checked before parsing.
* Depth: at most ``MAX_DEPTH`` nested collections, checked on the event stream (YAML) or on the
  bracket skeleton (JSON) before anything recursive runs.
* No anchors, aliases or merge keys (``&a``, ``*a``, ``<<``). We chose to refuse them outright
  rather than bound their expansion: a manifest is short, a reader should see every rule where
  it applies, and a refusal costs nothing to check. (PyYAML shares aliased nodes, so the cost of
  an alias bomb appears only when the graph is walked; counting would have to follow every walk.)
* Duplicate keys are an error, in YAML and in JSON (both would otherwise keep the last one
  silently, so two readers of one file could disagree on a rule). Keys must be strings: YAML 1.1
  reads an unquoted ``on`` or ``1`` key as a boolean or a number.
* Numbers: integers fit in 64 bits (refused by length before any conversion, so a 5,000-digit
  integer is not parsed at all), floats are finite (``.inf``, ``.nan``, ``1e999`` are refused).
* No raw NEL, LS or PS characters (U+0085, U+2028, U+2029): YAML 1.1 reads them as line breaks,
  YAML 1.2 does not; an escape (``"\\x85"``) is accepted.
* No YAML timestamps: ``2001-02-30`` stays the text that was written (no field is a date). Of the
  explicit tags only the JSON-like core tags are accepted (``!!str``, ``!!int``, ``!!float``,
  ``!!bool``, ``!!null``, ``!!seq``, ``!!map``); ``!!binary``, ``!!set``, ``!!timestamp`` and
  local tags are refused.

What is NOT done here: validating what the data means (the pydantic models do that, and a
``BoundaryInvalid`` from them names the key path), deciding whether JSON was written canonically
(the token and grant decoders re-encode with ``canonical_json`` and compare bytes themselves), or
bounding what a value costs later (a regular expression in a manifest is compiled, not run, here).
"""

from __future__ import annotations

import base64
import functools
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contain.errors import BoundaryInvalid

if TYPE_CHECKING:
    import yaml

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_NUMBER_CHARS",
    "Document",
    "UnreadableDocument",
    "decode_base64url",
    "parse_json_document",
    "parse_yaml_document",
    "read_config_document",
]

MAX_DOCUMENT_BYTES = 1024 * 1024  # a manifest or a config is a short file; a token is 8 KiB
MAX_DEPTH = 64  # the deepest real manifest nests 5 levels (tools[].args.NAME.hosts[])
MAX_NUMBER_CHARS = 64  # longer than any 64-bit integer or double in any spelling YAML allows
_INT_RANGE = (-(2**63), 2**64 - 1)  # signed or unsigned 64-bit: every integer a field can hold

_YAML_CORE = "tag:yaml.org,2002:"
# Explicit tags that only restate what JSON can say. Anything else is refused.
_ALLOWED_TAGS = frozenset(_YAML_CORE + name for name in ("str", "int", "float", "bool", "null", "seq", "map"))
# NEL, LINE SEPARATOR and PARAGRAPH SEPARATOR: YAML 1.1 (PyYAML) reads them as line breaks, YAML
# 1.2 as ordinary characters, so a value holding one means two things (found by tests/fuzz: an env
# value "\x85" read back as " ").
_YAML11_BREAKS = re.compile("[\x85\u2028\u2029]")
# Text inside JSON strings cannot nest; what is left are the brackets that do.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


class UnreadableDocument(ValueError):
    """A YAML or JSON document contain refuses to read (the message names the line)."""


@dataclass(frozen=True)
class Document:
    """Data read from a file, with the YAML node tree for line numbers (``None`` for JSON)."""

    data: Any
    node: yaml.Node | None


def read_config_document(path: str | os.PathLike[str], *, what: str) -> Document:
    """Read a YAML (or, for a ``.json`` name, JSON) config file through the strict parser.

    Args:
        path: the file.
        what: what the file is, for the message, e.g. "manifest" or "gateway config".

    Returns:
        The data (``None`` for an empty YAML file) and, for YAML, the node tree.

    Raises:
        BoundaryInvalid: unreadable, larger than ``MAX_DOCUMENT_BYTES``, not UTF-8, or refused by
            ``parse_yaml_document`` / ``parse_json_document``.
    """
    file = Path(path)
    try:
        with open(file, "rb") as stream:
            raw = stream.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise BoundaryInvalid(f"cannot read {what} {file}: {exc.strerror}", "check the path") from exc
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise BoundaryInvalid(f"{what} {file} is larger than 1 MiB", f"a {what} is a short file")
    try:
        text = raw.decode("utf-8")
        if file.suffix.lower() == ".json":
            return Document(parse_json_document(text), None)
        data, node = parse_yaml_document(text)
    except UnicodeDecodeError as exc:
        raise BoundaryInvalid(f"{file}: {what} is not UTF-8: {exc.reason}", "save the file as UTF-8") from exc
    except UnreadableDocument as exc:
        raise BoundaryInvalid(f"{file}: {what} refused: {exc}", "fix the line shown") from exc
    return Document(data, node)


# ---- base64url (tokens and grants) ------------------------------------------------------------

_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def decode_base64url(text: str) -> bytes:
    """Decode unpadded base64url (RFC 4648 section 5) in its one canonical spelling.

    Refused: padding, whitespace, ``+`` or ``/``, any other character, a length that no encoder
    produces (``len % 4 == 1``), and non-zero unused bits in the last character (``QR`` would
    otherwise decode like ``QQ``), so exactly one text decodes to each byte string.

    Raises:
        UnreadableDocument: for any other spelling.
    """
    if not text or not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise UnreadableDocument("segment is not unpadded base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii") != text:
        raise UnreadableDocument("segment is not canonical base64url (unused bits are set)")
    return data


# ---- JSON ------------------------------------------------------------------------------------


def _json_depth(text: str) -> int:
    depth = deepest = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise UnreadableDocument(f"duplicate key {key[:60]!r}; each key may appear once")
        out[key] = value
    return out


def _bounded_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise UnreadableDocument(f"integer {text[:40]}... is longer than {MAX_NUMBER_CHARS} characters")
    value = int(text)
    low, high = _INT_RANGE
    if not low <= value <= high:
        raise UnreadableDocument(f"integer {text[:40]} does not fit in 64 bits")
    return value


def _finite_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise UnreadableDocument(f"number {text[:40]}... is longer than {MAX_NUMBER_CHARS} characters")
    value = float(text)
    if not math.isfinite(value):
        raise UnreadableDocument(f"number {text[:40]} is not a finite double")
    return value


def _refuse_constant(text: str) -> Any:
    raise UnreadableDocument(f"{text} is not a JSON number")


def parse_json_document(data: str | bytes, *, max_bytes: int = MAX_DOCUMENT_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """Parse strict JSON: bounded size, depth and numbers; no duplicate keys; no NaN or Infinity.

    Args:
        data: the document (bytes must be UTF-8).
        max_bytes: refuse longer input (in bytes of UTF-8, or characters for ``str``).
        max_depth: refuse deeper nesting.

    Returns:
        The value.

    Raises:
        UnreadableDocument: for anything that is not such a document.
    """
    if len(data) > max_bytes:
        raise UnreadableDocument(f"document of {len(data)} bytes is larger than {max_bytes}")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise UnreadableDocument(f"document is not UTF-8: {exc.reason}") from exc
    if _json_depth(text) > max_depth:
        raise UnreadableDocument(f"document nests deeper than {max_depth} levels")
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_object,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            parse_constant=_refuse_constant,
        )
    except UnreadableDocument:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise UnreadableDocument(f"not valid JSON: {exc}") from exc


# ---- YAML ------------------------------------------------------------------------------------


def _where(node: yaml.Node | None) -> str:
    return f"line {node.start_mark.line + 1}: " if node is not None else ""


def _strict_loader_class() -> type[yaml.SafeLoader]:
    import yaml

    base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[valid-type,misc]
        """SafeLoader minus timestamps and merge keys, with unique string keys and bounded numbers."""

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[str, Any]:
            if not isinstance(node, yaml.MappingNode):
                raise UnreadableDocument(f"{_where(node)}expected a mapping")
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _YAML_CORE + "merge":
                    raise UnreadableDocument(f"{_where(key_node)}merge keys (<<) are not accepted; write the keys out")
                key = self.construct_object(key_node, deep=deep)
                if type(key) is not str:
                    raise UnreadableDocument(
                        f"{_where(key_node)}key {str(key)[:40]!r} is not a string; quote it "
                        "(YAML reads on, off, yes, no and numbers as values)"
                    )
                if key in out:
                    raise UnreadableDocument(f"{_where(key_node)}duplicate key {key[:60]!r}; each key may appear once")
                out[key] = self.construct_object(value_node, deep=deep)
            return out

        def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
            text = str(self.construct_scalar(node))
            if not text.strip("_+-"):  # PyYAML indexes text[0] and raises IndexError (fuzzing: `!!int `)
                raise UnreadableDocument(f"{_where(node)}an integer needs digits")
            if len(text) > MAX_NUMBER_CHARS:
                raise UnreadableDocument(f"{_where(node)}integer is longer than {MAX_NUMBER_CHARS} characters")
            value: int = super().construct_yaml_int(node)
            low, high = _INT_RANGE
            if not low <= value <= high:  # sexagesimal 1:2:3:... grows fast within 64 characters
                raise UnreadableDocument(f"{_where(node)}integer {text[:40]!r} does not fit in 64 bits")
            return value

        def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
            text = str(self.construct_scalar(node))
            if not text.strip("_+-."):
                raise UnreadableDocument(f"{_where(node)}a number needs digits")
            if len(text) > MAX_NUMBER_CHARS:
                raise UnreadableDocument(f"{_where(node)}number is longer than {MAX_NUMBER_CHARS} characters")
            value: float = super().construct_yaml_float(node)
            if not math.isfinite(value):
                raise UnreadableDocument(f"{_where(node)}{text[:40]!r} is not a finite number")
            return value

    StrictLoader.add_constructor(_YAML_CORE + "int", StrictLoader.construct_yaml_int)
    StrictLoader.add_constructor(_YAML_CORE + "float", StrictLoader.construct_yaml_float)
    # Dates stay text: copy the resolver table without the timestamp row (a class attribute
    # shared with SafeLoader, so it is replaced, never edited in place).
    StrictLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in rows if tag != _YAML_CORE + "timestamp"]
        for first, rows in base.yaml_implicit_resolvers.items()
    }
    return StrictLoader


@functools.cache
def _loader() -> type[yaml.SafeLoader]:
    return _strict_loader_class()  # built on first use: `contain run` without a manifest never imports yaml


def _check_events(text: str, *, max_depth: int) -> None:
    """One linear pass over the event stream: depth, anchors, aliases and tags."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=_loader()):
        mark = f"line {event.start_mark.line + 1}: " if event.start_mark is not None else ""
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise UnreadableDocument(f"{mark}anchors and aliases (&, *) are not accepted; write the value out")
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _ALLOWED_TAGS:
            raise UnreadableDocument(f"{mark}tag {tag[:60]!r} is not accepted; only plain YAML values are")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                raise UnreadableDocument(f"{mark}nesting deeper than {max_depth} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def parse_yaml_document(text: str, *, max_depth: int = MAX_DEPTH) -> tuple[Any, yaml.Node | None]:
    """Parse one strict YAML document (see the module docstring for what is refused).

    Args:
        text: the document (at most ``MAX_DOCUMENT_BYTES`` of UTF-8).
        max_depth: refuse deeper nesting.

    Returns:
        ``(data, node)``; both ``None`` for an empty document.

    Raises:
        UnreadableDocument: for anything refused, with the line.
    """
    import yaml

    if len(text.encode("utf-8", "surrogatepass")) > MAX_DOCUMENT_BYTES:
        raise UnreadableDocument(f"document is larger than {MAX_DOCUMENT_BYTES} bytes")
    found = _YAML11_BREAKS.search(text)
    if found:
        line = text.count("\n", 0, found.start()) + 1
        raise UnreadableDocument(
            f"line {line}: raw U+{ord(found.group()):04X} is a line break to YAML 1.1 and not to YAML 1.2; "
            "write it as an escape in a double-quoted string"
        )
    try:
        _check_events(text, max_depth=max_depth)
        loader = _loader()(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except UnreadableDocument:
        raise
    except yaml.YAMLError as exc:
        raise UnreadableDocument(f"not valid YAML: {exc}") from exc
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError) as exc:
        # A scalar a constructor cannot read (`!!int x`, `!!bool maybe`), translated here.
        raise UnreadableDocument(f"a value cannot be read: {type(exc).__name__}: {exc}") from exc
    return data, node
