"""Shared fixtures, and the markers every test gets from what it uses. Nothing in the tests may reach a
model hub.

    slow  the test loads the real model (the session's `llm` fixture, or a subprocess that does)
    ui    the test starts a browser or a `panel serve` server
    gpu   the test needs CUDA (skipped without it)

`python -m pytest -m "not slow and not ui"` is the quick loop to run while working (tiny models only).
A test that loads the model or starts a server in a way these fixtures do not show carries the marker
itself.

The run is spread over worker processes (pytest-xdist, one per core, at most MAX_WORKERS) unless `-n` says
otherwise (`-n 0`: one process, e.g. to debug). A browser test mostly waits for the server and the page, so
a second process checks the engine meanwhile. Each test file stays in one worker (its module fixtures are
built once), and every browser test runs in the same worker, against the one shared server."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

# Without a GPU the Triton kernels are checked under triton's interpreter, which must be switched on
# before triton is first imported (its own helpers are decorated at import): here, before any test
# module is collected, so every collection order runs the kernel tests in this process.
if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

MAX_WORKERS = 4                  # each worker that meets a `slow` test loads its own copy of the model
REAL_MODEL_FIXTURES = {"llm"}
UI_FIXTURES = {"server", "browser", "own_server"}
RUN_LAST = {"test_server_log_has_no_tracebacks"}     # reads the shared server's log once every page has closed


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    """Spread the run over the cores when pytest-xdist is installed and the command line left it alone
    (the GPU machine's bare environment has no xdist: there the run stays in one process)."""
    opt = config.option
    if (config.pluginmanager.hasplugin("xdist") and getattr(opt, "numprocesses", 0) is None
            and not os.environ.get("PYTEST_XDIST_WORKER") and not opt.collectonly):
        opt.numprocesses = max(1, min(os.cpu_count() or 1, MAX_WORKERS))
        if opt.dist == "no":
            opt.dist = "loadgroup"
            # workers parse the original command line (no --dist there): tell them to keep the groups
            os.environ["TESTS_DIST_LOADGROUP"] = "1"
    return (yield)


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("TESTS_DIST_LOADGROUP"):
        config.option.loadgroup = True       # xdist then tags each test with its group (remote.py)
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:       # share the cores between the workers instead of each one spinning threads on all of them
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


@pytest.hookimpl(tryfirst=True)          # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & REAL_MODEL_FIXTURES:
            item.add_marker(pytest.mark.slow)
        ui = bool(used & UI_FIXTURES) or item.path.parent.name == "ui"
        if ui:
            item.add_marker(pytest.mark.ui)
        # xdist's loadgroup: one worker runs each group in order (the browser tests share one server)
        item.add_marker(pytest.mark.xdist_group("ui" if ui else item.path.stem))
    items.sort(key=lambda item: item.originalname in RUN_LAST)       # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A test that changes torch's thread count (the CLI's --tp/--pp run in-process does) must not change
    the arithmetic of every test after it."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny matrices: extra intra-op threads only fight each other (and other jobs) for the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def llm():
    """The real embedded model on CPU in float32, loaded once for the whole run."""
    from engine import LLM
    return LLM(device="cpu")
