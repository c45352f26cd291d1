"""The load test's websocket readers read pages with Bokeh's Python client, which must know every model a
page holds. `import widgets` loads no widget (the registry is lazy), so the client's models are defined on
purpose; checked in a fresh interpreter, where nothing else has imported a widget first."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import sys
from bokeh.model import Model
from app.loadtest import client_models
client_models()
names = set(Model.model_class_reverse_map)
from panel.custom import ReactiveESM
def subclasses(c):
    for s in c.__subclasses__():
        yield s
        yield from subclasses(s)
assert "widgets.common.stepper" in sys.modules, "the Stepper was never defined"
ours = [c for c in subclasses(ReactiveESM) if c.__module__.startswith("widgets.")]
assert ours and all(c._data_model.__qualified_model__ in names for c in ours), ours
print(len(ours))
"""


def test_the_websocket_client_knows_our_components():
    run = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout.split()[-1]) >= 1
