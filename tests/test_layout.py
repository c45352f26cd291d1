"""The engine's layout rules: no import cycle between its modules, no module named like a standard
library one, and engine/ never imports Panel."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
