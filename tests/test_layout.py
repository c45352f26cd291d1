"""The repository's layout rules, read from the source (AST), not by importing it.

The engine: its packages form layers (imports only run down), no import cycle between its modules, no
module named like a standard library one, engine/ never imports Panel. The widgets: one folder each, on
the Widget base, none importing another or app/, the toolkit's pieces never copied back into a folder.
The top level: kernels -> engine -> widgets -> app, and widgets use the engine's public face only."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: str) -> set[str]:
    """Every engine module `path` imports, at the top or inside a function."""
    here = module_name(path)
    base = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base.split(".")
                parent = parent[:len(parent) - node.level + 1]
                target = ".".join(parent + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] == package}
    return found


def test_no_import_cycle_inside_the_engine():
    files = {module_name(p): p for p in (ROOT / "engine").rglob("*.py")}
    graph = {m: {t for t in imports_of(p, "engine") if t in files and t != m} for m, p in files.items()}
    # a package's __init__ only re-exports; the cycle that matters is between modules
    graph = {m: {t for t in ts if files[t].name != "__init__.py"} for m, ts in graph.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            assert state.get(t) != 1, "import cycle: " + " -> ".join(path + [m, t])
            if t not in state:
                visit(t, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert graph["engine.loader.tokenizer"].isdisjoint({"engine.loader.weights"})


def test_no_module_shadows_the_standard_library_and_no_panel():
    for path in list((ROOT / "engine").rglob("*.py")) + list((ROOT / "kernels").rglob("*.py")):
        assert path.stem not in sys.stdlib_module_names, f"{path} shadows the standard library"
        if path.is_relative_to(ROOT / "engine") or path.is_relative_to(ROOT / "kernels"):
            assert not imports_of(path, "panel"), f"{path} imports Panel"


# The engine's floors, bottom to top. A module may import from its own floor and the floors below it,
# never from one above. Within engine/, only the CLI imports the benchmarks (the package face reaches
# the widgets' workload helpers lazily, by name, so `import engine` loads no benchmark).
LAYERS = [
    ("records", ["engine.config", "engine.sampling_params"]),           # plain settings, read by all
    ("core", ["engine.core"]),                                          # scheduler, block manager: no tensors
    ("model", ["engine.model"]),                                        # the Llama, paged attention, sampler
    ("loader", ["engine.loader"]),                                      # weights and tokenizers -> a Llama
    ("worker", ["engine.worker"]),                                      # the model runner, the KV cache
    ("spec_decode", ["engine.spec_decode"]),                            # proposers on the runner's parts
    ("one engine", ["engine.detokenizer", "engine.outputs", "engine.output_processor",
                    "engine.llm_engine", "engine.sandbox"]),            # LLMEngine, stepped by its caller
    ("distributed", ["engine.distributed"]),                            # an LLMEngine over processes
    ("front door", ["engine.engine_loop", "engine.loop_stats", "engine.unpaged", "engine.introspect",
                    "engine.llm", "engine"]),                           # LLM, its loop thread, the public API
    ("serve", ["engine.serve"]),                                        # the OpenAI-compatible API over LLM
    ("bench", ["engine.bench"]),
    ("cli", ["engine.cli", "engine.__main__"]),
]


def floor_of(module: str) -> int:
    """The floor of a module: its longest prefix named in LAYERS."""
    best = (-1, -1)
    for floor, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                best = max(best, (len(prefix), floor))
    assert best[1] >= 0, f"{module} is on no floor: add it to LAYERS"
    return best[1]


def test_the_engine_packages_form_layers_and_imports_only_run_down():
    files = {module_name(p): p for p in (ROOT / "engine").rglob("*.py")}
    upward = []
    for module, path in sorted(files.items()):
        for target in sorted(imports_of(path, "engine")):
            while target not in files and "." in target:      # `from .x import name`: the module is x
                target = target.rsplit(".", 1)[0]
            if floor_of(target) > floor_of(module):
                upward.append(f"{module} ({LAYERS[floor_of(module)][0]}) imports {target} "
                              f"({LAYERS[floor_of(target)][0]})")
    assert not upward, "imports that run up a floor:\n" + "\n".join(upward)


def test_only_the_cli_imports_the_benchmarks_and_import_engine_loads_none():
    bench = [p for p in (ROOT / "engine").rglob("*.py")
             if not module_name(p).startswith(("engine.bench", "engine.cli"))
             and any(t.startswith("engine.bench") for t in imports_of(p, "engine"))]
    assert not bench, f"{bench} import engine/bench/"
    loaded = subprocess.run([sys.executable, "-c", "import sys, engine; "
                             "print(sorted(m for m in sys.modules if m.startswith('engine.bench')))"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", f"import engine loaded {loaded}"


def test_kernels_know_nothing_of_the_engine():
    for path in (ROOT / "kernels").rglob("*.py"):
        assert not imports_of(path, "engine"), f"{path} imports the engine"


# -- widgets/ ---------------------------------------------------------------------------------------------
# One folder per widget; inside it widget.py -> view.py -> compute.py -> engine; common/ (the toolkit) and
# modelled/ (hardware arithmetic) below every widget; app/ above all of them.
WIDGETS = ROOT / "widgets"
BELOW_WIDGETS = {"common", "modelled"}
ROLE_FLOOR = {"compute": 0, "view": 1, "widget": 2}          # other files in a folder: pieces, any floor


def widget_folders() -> list[Path]:
    return sorted(p for p in WIDGETS.iterdir() if (p / "widget.py").exists())


def test_every_widget_is_a_folder_with_its_three_roles_and_example():
    folders = widget_folders()
    assert len(folders) >= 19
    for folder in folders:
        for part in ("widget.py", "view.py", "compute.py", "example.json"):
            assert (folder / part).exists(), f"{folder.name} has no {part}"
    loose = [p.name for p in WIDGETS.glob("*.py") if p.name not in ("__init__.py", "bench.py", "bench_browser.py")]
    assert not loose, f"widget modules outside a folder: {loose}"


def test_no_widget_imports_another_or_the_app_and_roles_import_down():
    problems = []
    for path in WIDGETS.rglob("*.py"):
        here = path.relative_to(WIDGETS).parts
        folder = here[0] if len(here) > 1 else None
        targets = imports_of(path, "widgets")
        if imports_of(path, "app"):
            problems.append(f"{path.relative_to(ROOT)} imports app/")
        for target in targets:
            parts = target.split(".")
            if len(parts) < 2 or parts[1] in BELOW_WIDGETS or not (WIDGETS / parts[1]).is_dir():
                continue
            if folder in BELOW_WIDGETS:
                problems.append(f"{path.relative_to(ROOT)} (the toolkit) imports the widget {parts[1]}")
            elif folder is not None and parts[1] != folder:
                problems.append(f"{path.relative_to(ROOT)} imports another widget: {target}")
            elif folder is not None and len(parts) > 2:
                mine, theirs = ROLE_FLOOR.get(path.stem), ROLE_FLOOR.get(parts[2])
                if mine is not None and theirs is not None and theirs > mine:
                    problems.append(f"{path.relative_to(ROOT)} imports {target}, a role above it")
        if path.name == "compute.py" and (imports_of(path, "panel") or imports_of(path, "bokeh")):
            problems.append(f"{path.relative_to(ROOT)} (compute) imports Panel or Bokeh")
        if folder == "modelled" and imports_of(path, "panel"):
            problems.append(f"{path.relative_to(ROOT)} (modelled arithmetic) imports Panel")
    assert not problems, "\n".join(sorted(problems))


def test_importing_the_toolkit_imports_no_widget():
    loaded = subprocess.run([sys.executable, "-c", "import sys, widgets.common.sandboxes, widgets.modelled.hardware; "
                             "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('widgets.')}), "
                             "'panel' in sys.modules)"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "['common', 'modelled'] False", loaded


def test_every_widget_registers_one_class_on_the_widget_base():
    """What every widget repeats (the gate, the job runner, notes, Run/Stop, closing with the page) lives
    once in widgets/common/base.py; a widget that is not a `Widget` would have to write it again."""
    base = ast.parse((WIDGETS / "common" / "base.py").read_text())
    assert any(isinstance(n, ast.ClassDef) and n.name == "Widget" for n in base.body)
    for folder in widget_folders():
        registered = [n for n in ast.parse((folder / "widget.py").read_text()).body if isinstance(n, ast.ClassDef)
                      and any(getattr(d.func if isinstance(d, ast.Call) else d, "id", None) == "register"
                              for d in n.decorator_list)]
        assert len(registered) == 1, f"{folder.name}/widget.py registers {len(registered)} classes"
        bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in registered[0].bases]
        assert bases == ["Widget"], f"{folder.name}: {registered[0].name}({', '.join(bases)}) is not a Widget"


# Copies the toolkit replaced, one pattern each: a widget folder spelling one again would start a second
# version of it to keep in step (the base's say(), on_page_close() and run_button(), sandboxes.release(),
# cache.cached()).
COPIES = {
    "_notes_html": "its own notes writer (Widget.say)",
    "session_context": "its own page-end guard (Widget.on_page_close, gate.in_session)",
    '"Stop"': "its own Run/Stop toggle (Widget.run_button)",
    ".free()": "its own sandbox lifetime (sandboxes.page_sandbox / release, with the leak check)",
    "id(llm)": "a cache keyed by id(llm), which can hand back another object's data (cache.cached)",
}


def test_widget_folders_leave_the_shared_pieces_to_the_toolkit():
    found = [f"{path.relative_to(ROOT)}:{n}: {why}"
             for folder in widget_folders() for path in folder.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1)
             for pattern, why in COPIES.items() if pattern in line]
    assert not found, "\n".join(found)


# -- the top level ----------------------------------------------------------------------------------------
# kernels -> engine -> widgets -> app: a package imports only the ones before it. widgets/ reaches the engine
# through its public face alone (`from engine import ...`); app/ may also mount engine.serve's routes.
TOP = ["kernels", "engine", "widgets", "app"]


def modules_named(path: Path) -> set[str]:
    """The absolute module names an `import` or `from ... import` in `path` spells (relative ones skipped)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_the_top_level_packages_import_only_down_and_widgets_use_the_engines_public_face():
    problems = []
    for floor, package in enumerate(TOP):
        for path in (ROOT / package).rglob("*.py"):
            problems += [f"{path.relative_to(ROOT)} imports {above}/, above {package}/"
                         for above in TOP[floor + 1:] if imports_of(path, above)]
            if package == "widgets":
                problems += [f"{path.relative_to(ROOT)} imports {m}: widgets use `from engine import ...`"
                             for m in sorted(modules_named(path)) if m.startswith("engine.")]
    assert not problems, "\n".join(problems)
