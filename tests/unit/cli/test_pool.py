"""`contain pool`: task lines are parsed or refused with a cause (no sandbox run here; the runs
are in tests/integration/test_pool_cli.py)."""

from __future__ import annotations

import io

import pytest

from contain.cli import main
from contain.cli.pool import MAX_LINE_BYTES, Task, _task_lines, parse_task_line
from contain.errors import BoundaryInvalid


def test_an_array_line_is_the_argv_and_an_object_line_carries_id_stdin_and_timeout():
    assert parse_task_line('["python3", "-c", "pass"]\n', 4) == Task(4, ("python3", "-c", "pass"))
    line = '{"argv": ["cat"], "id": {"case": 9}, "stdin": "hé", "timeout": 2}'
    assert parse_task_line(line, 1) == Task(1, ("cat",), {"case": 9}, "hé".encode(), 2.0)


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("not json", "task line 3 is not JSON: Expecting value at column 1"),
        ('"echo"', "task line 3 is neither a JSON array nor an object"),
        ("[]", "task line 3: argv must be a non-empty list of non-empty strings"),
        ('["echo", 1]', "task line 3: argv must be a non-empty list of non-empty strings"),
        ('["echo", ""]', "task line 3: argv must be a non-empty list of non-empty strings"),
        ('{"argv": ["echo"], "env": {}}', "task line 3 has unknown key(s): env"),
        ('{"argv": ["cat"], "stdin": 5}', "task line 3: stdin must be a string"),
        ('{"argv": ["cat"], "timeout": 0}', "task line 3: timeout must be a positive number of seconds"),
        ('{"argv": ["cat"], "timeout": true}', "task line 3: timeout must be a positive number of seconds"),
        ('{"argv": ["cat"], "timeout": "5"}', "task line 3: timeout must be a positive number of seconds"),
    ],
)
def test_a_bad_line_is_refused_naming_its_line_and_what_is_wrong(line, cause):
    with pytest.raises(BoundaryInvalid) as caught:
        parse_task_line(line, 3)
    assert caught.value.cause == cause and caught.value.fix


def test_lines_are_numbered_blank_ones_skipped_and_overlong_or_non_utf8_ones_refused_alone():
    long_line = b'["echo", "' + b"x" * MAX_LINE_BYTES + b'"]\n'
    stream = io.BytesIO(b'["a"]\n\n' + long_line + b'\xff\xfe\n["b"]\n')
    lines = list(_task_lines(stream))
    assert [number for number, _ in lines] == [1, 3, 4, 5]
    assert lines[0][1] == '["a"]\n' and lines[3][1] == '["b"]\n'
    assert isinstance(lines[1][1], BoundaryInvalid) and "longer than" in lines[1][1].cause
    assert isinstance(lines[2][1], BoundaryInvalid) and lines[2][1].cause == "task line 4 is not UTF-8"


@pytest.mark.parametrize("args", [["--size", "0"], ["--jobs", "0"]])
def test_a_pool_without_sandboxes_or_workers_exits_2_before_starting_anything(args, capsys):
    assert main(["pool", *args]) == 2
    assert "--size and --jobs must be 1 or more" in capsys.readouterr().err
