"""Every Metallo process logs in one format (metallo.log_setup)."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from metallo.log_setup import FORMAT, configure_logging


def test_an_unknown_level_is_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match="DEBUG, INFO, WARNING"):
        configure_logging("chatty")


def test_a_service_process_logs_time_level_logger_message(tmp_path):
    code = (
        "import logging, os; os.environ['METALLO_LOG_LEVEL'] = 'warning';"
        "from metallo.log_setup import configure_logging; configure_logging();"
        "logging.getLogger('execution_core').info('hidden');"
        "logging.getLogger('execution_core').warning('shown')"
    )
    err = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stderr.strip()
    assert err.endswith(" WARNING execution_core: shown") and "hidden" not in err
    assert FORMAT == "%(asctime)s %(levelname)s %(name)s: %(message)s"
    assert logging.getLevelName(logging.WARNING) in err
