"""`pip install .` (not only `-e .`): the wheel carries every subpackage and the data beside the code.

Builds the wheel from a copy of the source (so the checkout gets no build/ or egg-info), installs it
into a fresh virtual environment that sees this one's packages (torch, Panel, ...) but not the
checkout, and imports every module of engine, kernels, widgets and app from the installed copy.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["engine", "kernels", "widgets", "app"]
DATA = ["content", "assets"]

pytestmark = pytest.mark.slow

CHECK = r"""
import importlib, json, sys
from pathlib import Path

site = Path(sys.argv[1]).resolve()
imported = []
for top in {packages}:
    for path in sorted((site / top).rglob("*.py")):
        parts = path.relative_to(site).with_suffix("").parts
        if parts[-1] == "__main__" or parts == ("app", "main"):   # scripts: running them is their import
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = importlib.import_module(name)
        assert Path(module.__file__).resolve().is_relative_to(site), (name, module.__file__)
        imported.append(name)

from app.content import CONTENT_DIR, list_chapters
assert CONTENT_DIR.resolve().is_relative_to(site) and list_chapters(), CONTENT_DIR
assert (site / "app" / "static" / "widgets.css").is_file()
examples = sorted((site / "widgets").glob("*/example.json"))
assert examples and all(json.loads(p.read_text()) for p in examples)
from engine import load_recorded
assert load_recorded("throughput") is not None         # the recorded GPU runs, engine/bench/data/*.json
print(len(imported), len(examples))
"""


def test_the_wheel_installs_every_module_and_the_data_beside_it(tmp_path):
    src = tmp_path / "src"
    for name in PACKAGES + DATA:
        shutil.copytree(ROOT / name, src / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=tmp_path, env=env, check=True, capture_output=True, text=True)

    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src), "-w", "dist")
    wheel = next((tmp_path / "dist").glob("*.whl"))
    run(sys.executable, "-m", "venv", "--system-site-packages", "venv")
    python = str(tmp_path / "venv" / "bin" / "python")
    run(python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel))
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()

    out = run(python, "-c", CHECK.format(packages=PACKAGES), site).stdout.split()
    scripts = {"__main__.py"}
    modules = [p for name in PACKAGES for p in (src / name).rglob("*.py")
               if p.name not in scripts and p.relative_to(src) != Path("app/main.py")]
    assert int(out[0]) == len(modules)
    assert int(out[1]) == len(list((src / "widgets").glob("*/example.json")))
