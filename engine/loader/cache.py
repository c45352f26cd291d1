"""The per-user model cache, file checksums, and the one error every loader raises."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


class WeightsError(RuntimeError):
    """A model file is missing, corrupt or unusable. The message says what to do; no traceback needed."""


def cache_dir() -> Path:
    """Per-user cache: $LLM_EXPLAINER_CACHE, else $XDG_CACHE_HOME/llm-explainer, else ~/.cache/llm-explainer."""
    if os.environ.get("LLM_EXPLAINER_CACHE"):
        return Path(os.environ["LLM_EXPLAINER_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "llm-explainer"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
