"""LazyLogger: the start-up path never imports logging for debug records; warnings always print."""

from __future__ import annotations

import logging
import subprocess
import sys

from contain._log import LazyLogger


def test_records_reach_the_standard_logger_once_logging_is_imported(caplog):
    caplog.set_level(logging.DEBUG, logger="contain.test")
    log = LazyLogger("contain.test")
    log.debug("detail %s", 1)
    log.warning("careful %s", 2)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("DEBUG", "detail 1"), ("WARNING", "careful 2")]


def test_debug_does_not_import_logging_and_a_warning_still_prints():
    script = (
        "import sys; from contain._log import LazyLogger; log = LazyLogger('x'); log.debug('quiet');"
        "print('logging' in sys.modules); log.warning('loud %s', 3)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout == "False\n" and "loud 3" in done.stderr and "quiet" not in done.stderr
