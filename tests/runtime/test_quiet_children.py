"""A rank or worker whose job imported Streamlit (a page's functions) logs none of the server's
warnings: "missing ScriptRunContext" once per call filled the server log, and the last words a
failed child leaves are its real error."""

from __future__ import annotations

import os
import sys

import pytest
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx  # as a page imports it

from partitioner.errors import RunError
from partitioner.processes.launch import launch
from partitioner.processes.worker import run_in_worker


def _warn_then_die(*_: object) -> None:
    for _ in range(30):  # what a page's code does when it runs outside a server
        get_script_run_ctx()
    print("the child's own last words", file=sys.stderr, flush=True)
    os._exit(3)


def test_a_worker_logs_no_server_warnings():
    with pytest.raises(RunError) as caught:
        run_in_worker(_warn_then_die, (), timeout_s=120, what="the test")
    assert "own last words" in str(caught.value) and "ScriptRunContext" not in str(caught.value)


@pytest.mark.slow
def test_ranks_log_no_server_warnings():
    with pytest.raises(RunError) as caught:
        launch(_warn_then_die, 2, timeout_s=120)
    assert "own last words" in str(caught.value) and "ScriptRunContext" not in str(caught.value)
