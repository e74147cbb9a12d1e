"""The two packages' layers. benchlib, the instrument a notebook imports, and dtype_bench, the tool
that runs and publishes studies with it: every import (module-level or inside a function) points
down or sideways within its own package, dtype_bench imports benchlib and never the reverse, and
no set of modules imports itself in a loop."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("benchlib", "dtype_bench")
# package -> subpackage -> floor; a subpackage imports only subpackages on lower floors (and itself)
FLOORS = {
    "benchlib": {"core": 1, "data": 2, "parallel": 2, "training": 3, "analysis": 3, "study": 4, "": 5},
    "dtype_bench": {"study": 1, "build_data": 1, "host": 2, "": 3},
}
# what serves one GPU host's limits (dtype_bench.host): only the command line and host itself import it
HOST_IMPORTERS = {("dtype_bench", "host"), ("dtype_bench", "")}
# the orchestration side's own dependencies: benchlib imports none of them
TOOL_ONLY = ("papermill", "nbformat", "nbconvert", "nbclient", "submitit", "jupyterlab", "jupyter_server", "ipykernel")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _ours(mod: str) -> bool:
    return mod.split(".")[0] in PACKAGES


def imports(path: Path) -> set[str]:
    """Every module of either package that ``path`` imports, resolved to a module (not a name in it)."""
    here = module_name(path)
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if _ours(a.name)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not _ours(mod):
                continue
            for a in node.names:  # `from benchlib.x import y`: y may be a module of package x
                sub = f"{mod}.{a.name}"
                out.add(sub if (ROOT / (sub.replace(".", "/") + ".py")).exists() else mod)
    out.discard(here)
    return out


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def package(mod: str) -> tuple[str, str]:
    """(top-level package, subpackage; '' for a module directly in the top-level package)."""
    parts = mod.split(".")
    top = parts[0]
    sub = parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in FLOORS[top]) else ""
    return top, sub


@pytest.mark.parametrize("top", PACKAGES)
def test_every_package_has_a_floor(top):
    assert {p.name for p in (ROOT / top).iterdir() if p.is_dir() and (p / "__init__.py").exists()} \
        == set(FLOORS[top]) - {""}


def test_no_import_points_up_or_across_a_floor():
    bad = []
    for mod, deps in graph().items():
        for dep in deps:
            a, b = package(mod), package(dep)
            if dep in PACKAGES or a == b or a[0] != b[0]:  # across packages: the next tests
                continue
            if FLOORS[b[0]][b[1]] >= FLOORS[a[0]][a[1]]:
                bad.append(f"{mod} -> {dep}")
    assert not bad, "imports that do not point down a floor:\n" + "\n".join(sorted(bad))


# ---- benchlib never imports dtype_bench ----------------------------------------------------
IMPORTERS = {"import_module", "__import__", "find_spec", "run_module"}


def reverse_imports(source: str, tool: str = "dtype_bench") -> list[str]:
    """Every way ``source`` reaches the tool's package: an import statement (anywhere, a function's
    included), a call that imports a module named by a string (``importlib.import_module``,
    ``__import__``, ``find_spec``, ``runpy.run_module``), a ``module:function`` string naming one
    of its functions, and ``-m <tool>`` in a command (a process started on it)."""
    def names(mod: str) -> bool:
        return mod == tool or mod.startswith(tool + ".")

    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [f"line {line}: import {a.name}" for a in node.names if names(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and names(node.module or ""):
            found.append(f"line {line}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            arg = node.args[0] if node.args else None
            if fn in IMPORTERS and isinstance(arg, ast.Constant) and isinstance(arg.value, str) and names(arg.value):
                found.append(f"line {line}: {fn}({arg.value!r})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            mod, colon, fn = node.value.partition(":")
            if colon and fn.isidentifier() and names(mod):
                found.append(f"line {line}: {node.value!r}")
        elif isinstance(node, (ast.List, ast.Tuple)):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found += [f"line {line}: -m {b}" for a, b in zip(items, items[1:])
                      if a == "-m" and isinstance(b, str) and names(b)]
    return found


def test_benchlib_never_imports_dtype_bench():
    bad = [f"{p.relative_to(ROOT)} {hit}" for p in sorted((ROOT / "benchlib").rglob("*.py"))
           for hit in reverse_imports(p.read_text())]
    assert not bad, "benchlib reaches into dtype_bench:\n" + "\n".join(bad)


@pytest.mark.parametrize("source", [
    "from dtype_bench.study.sweep import main\n",
    "import dtype_bench.cli\n",
    "def f():\n    import dtype_bench\n",
    "def f():\n    from dtype_bench.host import pack\n",
    "import importlib\nimportlib.import_module('dtype_bench.study.compact')\n",
    "__import__('dtype_bench')\n",
    "LAZY = {'sweep': ('dtype_bench.host.sweep:main', 'help')}\n",
    "cmd = [sys.executable, '-m', 'dtype_bench', 'sweep']\n",
])
def test_the_reverse_import_check_reports_a_constructed_one(source):
    assert reverse_imports(source)


def test_the_reverse_import_check_passes_what_is_no_import():
    source = ("import benchlib.core\nfrom benchlib.study import notebook\n"
              "META = 'dtype_bench_checkpoint.json'\nKEY = f'dtype_bench/run{1}'\n"
              "cmd = [sys.executable, '-m', 'benchlib.run']\n")
    assert reverse_imports(source) == []


def test_dtype_bench_imports_benchlib():
    """The direction the packages meet: the tool's sweep and command line build on the instrument."""
    g = graph()
    assert any(package(d)[0] == "benchlib" for d in g["dtype_bench.study.sweep"])
    assert any(package(d)[0] == "benchlib" for d in g["dtype_bench.cli"])


# ---- dtype_bench's host layer ----------------------------------------------------------------
def host_importers(g: dict[str, set[str]]) -> list[str]:
    """Imports of dtype_bench.host from a package outside ``HOST_IMPORTERS``."""
    return sorted(f"{m} -> {d}" for m, ds in g.items() for d in ds
                  if package(d) == ("dtype_bench", "host") and package(m) not in HOST_IMPORTERS)


def test_the_study_layer_never_imports_the_host_layer():
    assert not host_importers(graph()), "imports of dtype_bench.host:\n" + "\n".join(host_importers(graph()))
    # the rule catches such an import (and lets the command line's pass)
    assert host_importers({"dtype_bench.study.sweep": {"dtype_bench.host.budget"},
                           "dtype_bench.cli": {"dtype_bench.host.sweep"}}) \
        == ["dtype_bench.study.sweep -> dtype_bench.host.budget"]


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


def test_no_import_cycle_inside_or_between_the_packages():
    cycle = find_cycle({m: {d for d in ds if d not in PACKAGES} for m, ds in graph().items()})
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("g, cyclic", [({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
                                       ({"a": {"b"}, "b": {"c"}, "c": set()}, False)])
def test_the_cycle_finder_finds_a_constructed_cycle(g, cyclic):
    assert (find_cycle(g) is not None) == cyclic


def test_a_run_and_its_summary_need_no_chart_library():
    """The offline GPU host has no altair: ``dtype-bench run`` trains, writes its record and prints
    its summary without importing it (only analysis draws charts)."""
    code = ("import sys; sys.modules['altair'] = None\n"
            "import dtype_bench.cli, benchlib.run, benchlib.training.loop\n"
            "from benchlib.study.notebook import result_summary\n"
            "assert 'benchlib.analysis.charts' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)


def test_benchlib_needs_none_of_the_tools_dependencies():
    """Every benchlib module imports with the notebook runner, Jupyter and submitit absent (a module
    whose own optional package is missing here, such as triton, aside): they are the ``study``
    extra's, which the tool needs and a notebook importing benchlib does not."""
    code = ("import sys, pkgutil, importlib\n"
            f"for m in {TOOL_ONLY!r}: sys.modules[m] = None\n"
            "import benchlib\n"
            "for info in pkgutil.walk_packages(benchlib.__path__, 'benchlib.'):\n"
            "    try:\n"
            "        importlib.import_module(info.name)\n"
            "    except ModuleNotFoundError as e:  # a GPU-only module's own need (triton) is not the question\n"
            f"        if (e.name or '').split('.')[0] in {TOOL_ONLY!r}: raise\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300, cwd=ROOT)
