"""`pytest -m gpu` collects on the GPU machine, which has the engine's dependencies but not the app's:
no Panel, no Playwright, no Markdown plugins, no gguf. Simulated here by blocking those imports in a
fresh interpreter; the app and browser test modules must skip, not error."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ABSENT = ("panel", "param", "bokeh", "playwright", "markdown_it", "mdit_py_plugins", "gguf", "hypothesis")

DRIVER = f"""
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {ABSENT!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: not on the GPU machine)")
sys.meta_path.insert(0, Absent())
import pytest
sys.exit(pytest.main(["-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider"]))
"""


def test_gpu_tests_collect_without_the_app_dependencies():
    # PYTEST_ADDOPTS (say -v) would change what --collect-only -q prints
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    run = subprocess.run([sys.executable, "-c", DRIVER], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "error" not in out.lower(), out[-3000:]
    collected = {line.split("::")[0] for line in run.stdout.splitlines() if "::" in line}
    assert {"tests/gpu/test_engine_gpu.py", "tests/gpu/test_kernels_gpu.py"} <= collected
