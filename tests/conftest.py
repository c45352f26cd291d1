"""Shared fixtures, and the markers every test gets from what it uses. Nothing in the tests may reach a
model hub.

    slow  the test loads the real model (the session's `llm` fixture, or a subprocess that does)
    ui    the test starts a browser or a `panel serve` server
    gpu   the test needs CUDA (skipped without it)

`python -m pytest -m "not slow and not ui"` is the quick loop to run while working (tiny models only).
A test that loads the model or starts a server in a way these fixtures do not show carries the marker
itself."""
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

REAL_MODEL_FIXTURES = {"llm"}
UI_FIXTURES = {"server", "browser", "own_server"}
RUN_LAST = {"test_server_log_has_no_tracebacks"}     # reads the shared server's log once every page has closed


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & REAL_MODEL_FIXTURES:
            item.add_marker(pytest.mark.slow)
        if used & UI_FIXTURES or item.path.parent.name == "ui":
            item.add_marker(pytest.mark.ui)
    items.sort(key=lambda item: item.originalname in RUN_LAST)       # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """A test that changes torch's thread count (the CLI's --tp/--pp run in-process does) must not change
    the arithmetic of every test after it."""
    before = torch.get_num_threads()
    yield
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def llm():
    """The real embedded model on CPU in float32, loaded once for the whole run."""
    from engine import LLM
    return LLM(device="cpu")
