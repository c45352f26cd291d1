"""Shared fixtures. Nothing in the tests may reach a model hub."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest


@pytest.fixture(scope="session")
def llm():
    """The real embedded model on CPU in float32, loaded once for the whole run."""
    from engine import LLM
    return LLM(device="cpu")
