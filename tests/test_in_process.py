"""The trainer in pytest's process (mgpu_testing.in_process): what a run changes is put back, and what only a
process of its own can do is refused before anything runs."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import signal
import sys
import threading

import numpy as np
import pytest
import torch
from mgpu_testing.in_process import HiddenModules, LogStreams, ProcessState, refuse_process_only
from mgpu_testing.training import single_env, train_in_process


def test_process_state_is_put_back():
    threads, hook, handler = torch.get_num_threads(), threading.excepthook, signal.getsignal(signal.SIGUSR2)
    rng = torch.random.get_rng_state()
    saved = ProcessState.save()
    torch.set_num_threads(threads + 1)
    torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    torch.set_printoptions(precision=1)
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    threading.excepthook = lambda args: None
    signal.signal(signal.SIGUSR2, lambda *_: None)
    os.environ["PYTHONHASHSEED"] = "123"
    os.chdir("/")
    assert saved.restore() == []
    assert (torch.get_num_threads(), threading.excepthook, signal.getsignal(signal.SIGUSR2)) == (threads, hook, handler)
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert dict(os.environ) == saved.environ and os.getcwd() == saved.cwd
    assert torch.backends.cudnn.benchmark == saved.torch["cudnn"][0]
    assert torch._tensor_str.PRINT_OPTS.precision == saved.torch["print_options"]["precision"]


def test_hidden_modules_are_not_installed_for_the_call_only():
    import importlib.util

    assert "numpy" in sys.modules
    with HiddenModules(("numpy", "mgpu_lab_no_such_module")):
        assert importlib.util.find_spec("numpy") is None
        with pytest.raises(ImportError):
            import numpy  # noqa: F401
    assert sys.modules["numpy"] is np and "mgpu_lab_no_such_module" not in sys.modules


@pytest.mark.parametrize(
    ("env", "faults"),
    [
        ({"MGPU_LAB_SUPERVISE_DIR": "/tmp"}, ""),
        ({"MGPU_TESTING_SEAMS": '{"stop_in_save": "/tmp/marker"}'}, ""),
        ({}, "hang:0:1"),
        ({}, "raise:0:1,signal:0:2:SIGTERM"),
    ],
)
def test_what_only_a_process_can_do_is_refused(env, faults):
    with pytest.raises(ValueError, match="process of its own"):
        refuse_process_only(env, faults)
    with pytest.raises(ValueError, match="process of its own"):
        train_in_process(["--rl_library", "rsl_rl", "--device", "cpu"], single_env(**env), faults=faults)


@pytest.mark.parametrize("fault", ["raise:0:1", "skip:0:1"])
def test_faults_that_stay_in_the_process_are_allowed(fault):
    refuse_process_only({}, fault)


def test_log_handlers_write_to_the_calls_streams_and_then_to_the_streams_of_before():
    logger = logging.getLogger("mgpu_lab_test_in_process")
    before = logging.StreamHandler(sys.stderr)  # made before the call (a library imported earlier)
    logger.addHandler(before)
    out, err = io.StringIO(), io.StringIO()
    try:
        with LogStreams(out, err), contextlib.redirect_stderr(err):
            logger.error("from the call")
            during = logging.StreamHandler(sys.stderr)  # made during the call (a library's first import)
            logger.addHandler(during)
        assert err.getvalue() == "from the call\n"
        assert before.stream is sys.stderr and during.stream is sys.stderr
    finally:
        logger.handlers.clear()
