"""contain._log: one lazy logger, named ``log`` in every module; start-up never imports logging."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import contain
from contain import _log
from contain._log import LazyLogger

SOURCE_ROOT = Path(contain.__file__).parent
THE_MECHANISM = "contain/_log.py"

# Modules that may import ``logging`` themselves, each with its reason.
MAY_IMPORT_LOGGING = {
    THE_MECHANISM: "the one mechanism: it forwards records to logging",
    "contain/cli/__init__.py": "CONTAIN_DEBUG configures logging (stderr, DEBUG) inside main()",
}


def _is_lazy_logger_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "LazyLogger"


def logging_problems(source: str, relpath: str) -> list[str]:
    """What in one module's source breaks the rule: ``log = LazyLogger(__name__)`` at module level, nothing else."""
    tree = ast.parse(source)
    problems: list[str] = []
    well_formed: set[int] = set()
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and _is_lazy_logger_call(statement.value):
            call = statement.value
            assert isinstance(call, ast.Call)
            named_log = [t.id for t in statement.targets if isinstance(t, ast.Name)] == ["log"]
            of_module = [a.id for a in call.args if isinstance(a, ast.Name)] == ["__name__"] and not call.keywords
            if named_log and of_module and len(call.args) == 1:
                well_formed.add(id(call))
    for node in ast.walk(tree):
        if _is_lazy_logger_call(node) and id(node) not in well_formed:
            problems.append(f"{relpath}:{node.lineno}: a logger other than `log = LazyLogger(__name__)`")
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called == "getLogger" and relpath != THE_MECHANISM:
                problems.append(f"{relpath}:{node.lineno}: calls getLogger")
        imported: list[str] = []
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported = [node.module]
        if relpath not in MAY_IMPORT_LOGGING and any(n == "logging" or n.startswith("logging.") for n in imported):
            problems.append(f"{relpath}:{node.lineno}: imports logging")
    return problems


def test_records_of_every_level_reach_the_standard_logger_once_logging_is_imported(caplog):
    caplog.set_level(logging.DEBUG, logger="contain.test")
    log = LazyLogger("contain.test")
    log.debug("detail %s", 1)
    log.info("note %s", 2)
    log.warning("careful %s", 3)
    log.error("failed %s", 4)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("crashed %s", 5)
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("contain.test", "DEBUG", "detail 1"),
        ("contain.test", "INFO", "note 2"),
        ("contain.test", "WARNING", "careful 3"),
        ("contain.test", "ERROR", "failed 4"),
        ("contain.test", "ERROR", "crashed 5"),
    ]
    assert [r.exc_info is not None for r in caplog.records] == [False, False, False, False, True]
    raised = caplog.records[-1].exc_info
    assert raised is not None and isinstance(raised[1], ValueError)


def test_records_name_the_line_that_logged_not_the_lazy_logger(caplog):
    caplog.set_level(logging.DEBUG, logger="contain.test")
    log = LazyLogger("contain.test")
    for emit in (log.debug, log.info, log.warning, log.error, log.exception):
        emit("where")
    line = sys._getframe().f_lineno - 1
    assert {(Path(r.pathname), r.lineno, r.funcName) for r in caplog.records} == {
        (Path(__file__), line, "test_records_name_the_line_that_logged_not_the_lazy_logger")
    }
    assert len(caplog.records) == 5


def test_an_exception_object_given_as_exc_info_is_attached_to_the_record(caplog):
    caplog.set_level(logging.DEBUG, logger="contain.test")
    error = OSError(5, "Input/output error")
    LazyLogger("contain.test").error("request failed", exc_info=error)
    LazyLogger("contain.test").warning("went on", exc_info=True)  # outside an except: no exception to attach
    first, second = caplog.records
    assert first.exc_info is not None and first.exc_info[1] is error
    assert second.exc_info in (None, (None, None, None))


def test_the_level_numbers_are_those_of_logging():
    assert (_log._DEBUG, _log._INFO, _log._WARNING, _log._ERROR) == (
        logging.DEBUG,
        logging.INFO,
        logging.WARNING,
        logging.ERROR,
    )


def test_debug_and_info_do_not_import_logging_and_warnings_and_errors_still_print_on_stderr():
    script = (
        "import sys; from contain._log import LazyLogger; log = LazyLogger('x');"
        "log.debug('quiet'); log.info('hushed'); print('logging' in sys.modules);"
        "log.warning('loud %s', 3); log.error('bad %s', 4)\n"
        "try:\n    1/0\nexcept ZeroDivisionError:\n    log.exception('crash %s', 5)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout == "False\n"
    assert "quiet" not in done.stderr and "hushed" not in done.stderr
    assert [line for line in done.stderr.splitlines() if line[-1:].isdigit()] == ["loud 3", "bad 4", "crash 5"]
    assert "ZeroDivisionError" in done.stderr


@pytest.mark.parametrize(
    "source",
    [
        "import logging\nlog = logging.getLogger(__name__)\n",
        "import logging as lg\n",
        "from logging import getLogger\nlog = getLogger(__name__)\n",
        "from logging.handlers import SysLogHandler\n",
        "from contain._log import LazyLogger\nlogger = LazyLogger(__name__)\n",
        "from contain._log import LazyLogger\n_log = LazyLogger(__name__)\n",
        "from contain._log import LazyLogger\nlog = LazyLogger('contain.other')\n",
        "from contain._log import LazyLogger\ndef f():\n    log = LazyLogger(__name__)\n",
        "from contain._log import LazyLogger\nclass C:\n    log = LazyLogger(__name__)\n",
        "from contain._log import LazyLogger\nlog = other = LazyLogger(__name__)\n",
    ],
)
def test_the_source_rule_catches_every_other_spelling_of_a_logger(source):
    assert logging_problems(source, "contain/example.py")


def test_the_source_rule_accepts_the_one_spelling():
    assert logging_problems("from contain._log import LazyLogger\nlog = LazyLogger(__name__)\n", "contain/x.py") == []


def test_every_module_logs_through_one_lazy_logger_named_log():
    modules = sorted(SOURCE_ROOT.rglob("*.py"))
    problems = [
        problem
        for path in modules
        for problem in logging_problems(path.read_text(), path.relative_to(SOURCE_ROOT.parent).as_posix())
    ]
    assert problems == []
    holding_log = [p for p in modules if "log = LazyLogger(__name__)" in p.read_text()]
    assert len(holding_log) >= 20  # the walk saw the tree it is meant to check
    assert set(MAY_IMPORT_LOGGING) <= {p.relative_to(SOURCE_ROOT.parent).as_posix() for p in modules}


@pytest.mark.parametrize("module", ["contain.runtime.sandbox", "contain.cli.run"])
def test_the_sandbox_start_up_path_does_not_import_logging(module):
    script = f"import sys, {module}; print('logging' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == "False\n"


def test_contain_debug_switches_debug_records_on_and_sends_them_to_stderr():
    script = (
        "import sys; from contain.cli import main; from contain._log import LazyLogger;"
        "status = main([]); LazyLogger('contain.x').debug('shown %s', 7); sys.exit(status)"
    )
    for debug, shown in (("1", True), ("", False)):
        env = {"PATH": "/usr/bin:/bin", "CONTAIN_DEBUG": debug}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, env=env)
        assert done.returncode == 2  # main([]) prints the usage and returns 2
        assert ("DEBUG:contain.x:shown 7" in done.stderr) is shown
        assert "shown" not in done.stdout
