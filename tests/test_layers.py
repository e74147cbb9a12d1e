"""benchlib's layers: every import (module-level or inside a function) points down or sideways
within its own package, and no set of modules imports itself in a loop."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "benchlib"
# package -> floor; a package imports only packages on lower floors (and itself)
FLOORS = {"core": 1, "data": 2, "parallel": 2, "training": 3, "analysis": 3, "study": 4, "host": 5, "": 6}
# what serves one GPU host's limits (benchlib.host): only the command line and host itself import it
HOST_IMPORTERS = {"host", ""}


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every benchlib module that ``path`` imports, resolved to a module (not a name in it)."""
    here = module_name(path)
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("benchlib")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("benchlib"):
                continue
            for a in node.names:  # `from benchlib.x import y`: y may be a module of package x
                sub = f"{mod}.{a.name}"
                out.add(sub if (PKG.parent / (sub.replace(".", "/") + ".py")).exists() else mod)
    out.discard(here)
    return out


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in PKG.rglob("*.py")}


def package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FLOORS) else ""


def test_every_package_has_a_floor():
    assert {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(FLOORS) - {""}


def test_no_import_points_up_or_across_a_floor():
    bad = []
    for mod, deps in graph().items():
        for dep in deps:
            a, b = package(mod), package(dep)
            if dep == "benchlib" or a == b:
                continue
            if FLOORS[b] >= FLOORS[a]:
                bad.append(f"{mod} -> {dep}")
    assert not bad, "imports that do not point down a floor:\n" + "\n".join(sorted(bad))


def host_importers(g: dict[str, set[str]]) -> list[str]:
    """Imports of benchlib.host from a package outside ``HOST_IMPORTERS``."""
    return sorted(f"{m} -> {d}" for m, ds in g.items() for d in ds
                  if package(d) == "host" and package(m) not in HOST_IMPORTERS)


def test_the_core_never_imports_the_host_layer():
    assert not host_importers(graph()), "imports of benchlib.host:\n" + "\n".join(host_importers(graph()))
    # the rule catches such an import (and lets the command line's pass)
    assert host_importers({"benchlib.study.sweep": {"benchlib.host.budget"}, "benchlib.cli": {"benchlib.host.sweep"}}) \
        == ["benchlib.study.sweep -> benchlib.host.budget"]


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(g):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_no_import_cycle_inside_benchlib():
    cycle = find_cycle({m: {d for d in ds if d != "benchlib"} for m, ds in graph().items()})
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("g, cyclic", [({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
                                       ({"a": {"b"}, "b": {"c"}, "c": set()}, False)])
def test_the_cycle_finder_finds_a_constructed_cycle(g, cyclic):
    assert (find_cycle(g) is not None) == cyclic


def test_a_run_and_its_summary_need_no_chart_library():
    """The offline GPU host has no altair: ``dtype-bench run`` trains, writes its record and prints
    its summary without importing it (only analysis draws charts)."""
    code = ("import sys; sys.modules['altair'] = None\n"
            "import benchlib.cli, benchlib.training.loop\n"
            "from benchlib.study.notebook import result_summary\n"
            "assert 'benchlib.analysis.charts' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
