"""Fuzzing the manifest loader (YAML and JSON) and the strict document reader under it.

Properties: any text gives data or ``UnreadableDocument`` (any file gives a ``Boundary`` or
``BoundaryInvalid``), quickly; plain data rendered to YAML or JSON parses back equal; a boundary
rendered back to a manifest loads to the same boundary.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from contain.boundary import Boundary, boundary_from_mapping, load_boundary
from contain.boundary.documents import UnreadableDocument, parse_json_document, parse_yaml_document
from contain.errors import BoundaryInvalid

# Issue 18 item 8, replayed on every run.
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
FINDINGS = [
    "task: 2001-02-30\n",
    "resources:\n  pids_max: " + "9" * 5000 + "\n",
    "resources:\n  memory_bytes: " + "9" * 400 + "\n",
    "resources:\n  wall_s: " + "9" * 400 + "\n",
    "tools:\n- {name: a, verdict: allow, args: {x: {pattern: 'a{99999999999}'}}}\n",
    "env: " + "[" * 3000 + "]" * 3000 + "\n",
    "task: a\ntask: b\n",
    "<<: {task: a}\n",
    ALIAS_BOMB,
]

KEYS = [
    "version",
    "task",
    "principal",
    "files",
    "network",
    "allow",
    "host",
    "ports",
    "hosts",
    "resources",
    "wall_s",
    "memory_bytes",
    "pids_max",
    "env",
    "tools",
    "name",
    "verdict",
    "args",
    "pattern",
    "hardening",
    "landlock",
    "<<",
]
yaml_tokens = st.sampled_from(
    [
        *KEYS,
        ": ",
        "\n",
        "  ",
        "- ",
        "[",
        "]",
        "{",
        "}",
        ",",
        "&a ",
        "*a",
        "!!binary ",
        "!!int ",
        "'",
        '"',
        "#",
        "2001-02-30",
        "9" * 30,
        ".inf",
        "1e999",
        "0x",
        "on",
        "~",
        "---\n",
        "? ",
        "\t",
        "\u00b2",
        "\x00",
    ]
)
yaml_texts = st.one_of(st.lists(yaml_tokens, max_size=40).map("".join), st.text(max_size=200))


def _with_findings(test):  # type: ignore[no-untyped-def]
    for finding in FINDINGS:
        test = example(finding)(test)
    return test


@_with_findings
@given(yaml_texts)
def test_any_yaml_text_is_data_or_a_refusal_and_is_quick(text: str) -> None:
    started = time.monotonic()
    try:
        parse_yaml_document(text)
    except UnreadableDocument as exc:
        assert str(exc)
    assert time.monotonic() - started < 2.0


@_with_findings
@given(yaml_texts)
def test_any_manifest_file_is_a_boundary_or_boundary_invalid(tmp_path_factory, text: str) -> None:  # type: ignore[no-untyped-def]
    path = Path(tmp_path_factory.mktemp("m")) / "contain.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        assert isinstance(load_boundary(path), Boundary)
    except BoundaryInvalid as exc:
        assert exc.cause and exc.fix


json_texts = st.one_of(
    st.lists(
        st.sampled_from(
            [
                "{",
                "}",
                "[",
                "]",
                ",",
                ":",
                '"a"',
                '"a"',
                "1",
                "1e999",
                "NaN",
                "-0",
                "true",
                "null",
                "9" * 40,
                " ",
                '"\\ud800"',
                '"\\"',
                "1.0",
            ]
        ),
        max_size=40,
    ).map("".join),
    st.text(max_size=100),
)


@given(json_texts)
@example('{"a": 1, "a": 2}')
@example("[" * 3000 + "]" * 3000)
@example("1" * 5000)
def test_any_json_text_is_a_value_or_a_refusal(text: str) -> None:
    try:
        parse_json_document(text)
    except UnreadableDocument as exc:
        assert str(exc)


plain_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8"), max_size=20),
)
plain_data = st.recursive(
    plain_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=8), children, max_size=4),
    ),
    max_leaves=20,
)


@given(plain_data)
@example({"task": "2001-02-30", "on": "yes", "n": 2**64 - 1})
@example({"\x85": None})
def test_plain_data_rendered_as_yaml_or_json_reads_back_equal(data: object) -> None:
    assert parse_json_document(json.dumps(data)) == data
    text = yaml.safe_dump(data, allow_unicode=False)  # escapes NEL, LS and PS, which 1.1 reads as breaks
    assert parse_yaml_document(text)[0] == data


names = st.from_regex(r"[a-z][a-z0-9]{0,8}(\.[a-z][a-z0-9]{0,8}){1,2}", fullmatch=True)
manifests = st.fixed_dictionaries(
    {},
    optional={
        "task": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True),
        "principal": st.text(max_size=10),
        "network": st.fixed_dictionaries(
            {
                "allow": st.lists(
                    st.fixed_dictionaries(
                        {
                            "host": st.one_of(
                                names, names.map(lambda n: "*." + n), st.sampled_from(["10.0.0.0/8", "::1/128"])
                            )
                        },
                        optional={"ports": st.lists(st.integers(1, 65535), min_size=1, max_size=3)},
                    ),
                    max_size=3,
                ),
                "hosts": st.dictionaries(names, st.sampled_from(["127.0.0.1", "::1"]), max_size=2),
            }
        ),
        "resources": st.fixed_dictionaries(
            {},
            optional={
                "wall_s": st.one_of(st.floats(0.001, 86400), st.sampled_from(["90s", "10m", "500ms"])),
                "memory_bytes": st.one_of(st.integers(16 * 1024**2, 2**40), st.sampled_from(["512MiB", "1GiB"])),
                "pids_max": st.integers(8, 65536),
            },
        ),
        "env": st.dictionaries(
            st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), st.text(max_size=10), max_size=3
        ),
        "tools": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.from_regex(r"[a-z_.*]{1,10}", fullmatch=True),
                    "verdict": st.sampled_from(["allow", "deny", "review"]),
                },
                optional={
                    "args": st.dictionaries(
                        st.sampled_from(["path", "url"]),
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "pattern": st.sampled_from(["^a+$", "a{99999999999}", "(" * 3000 + ")" * 3000]),
                                "max_length": st.integers(0, 2**63),
                            },
                        ),
                        max_size=2,
                    )
                },
            ),
            max_size=3,
        ),
    },
)


@given(manifests)
def test_a_boundary_rendered_back_to_a_manifest_loads_to_the_same_boundary(tmp_path_factory, data: dict) -> None:  # type: ignore[no-untyped-def]
    try:
        first = boundary_from_mapping(data, base_dir=Path("/"))
    except BoundaryInvalid:
        return
    rendered = yaml.safe_dump(first.model_dump(mode="json"), allow_unicode=False)
    path = Path(tmp_path_factory.mktemp("m")) / "contain.yaml"
    path.write_text(rendered, encoding="utf-8")
    assert load_boundary(path) == first
