"""No function in benchlib/core/ or benchlib/training/ is longer than one screen-and-a-bit
(80 lines, decorators and docstring included): the core a newcomer reads first stays readable."""
import ast
from pathlib import Path

LIMIT = 80
ROOT = Path(__file__).resolve().parent.parent / "benchlib"
LAYERS = ("core", "training")
# functions over the limit that their own module's rework is to split (path relative to benchlib/)
ALLOWED: set[tuple[str, str]] = set()


def long_functions(root: Path, limit: int = LIMIT) -> list[tuple[str, str, int]]:
    """(path relative to ``root``, qualified name, lines) of every function over ``limit`` lines."""
    found = []
    for path in sorted(p for layer in LAYERS for p in (root / layer).rglob("*.py")):
        rel = path.relative_to(root).as_posix()

        def visit(node, prefix=""):
            for child in ast.iter_child_nodes(node):
                name = prefix
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}."
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    if child.end_lineno - first + 1 > limit:
                        found.append((rel, name[:-1], child.end_lineno - first + 1))
                visit(child, name)
        visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def test_no_function_in_core_or_training_is_over_80_lines():
    over = [f"{rel}: {name} ({n} lines)" for rel, name, n in long_functions(ROOT) if (rel, name) not in ALLOWED]
    assert not over, f"functions over {LIMIT} lines (split them): " + "; ".join(over)


def test_the_size_check_finds_a_long_function(tmp_path):
    """The check can fail: a 90-line function in a method of a class in core/ is named."""
    (tmp_path / "core").mkdir()
    (tmp_path / "training").mkdir()
    body = "\n".join(f"        x{i} = {i}" for i in range(88))
    (tmp_path / "core" / "m.py").write_text(f"class C:\n    @staticmethod\n    def f():\n{body}\n\n    def g():\n"
                                            f"        return 1\n")
    assert long_functions(tmp_path) == [("core/m.py", "C.f", 90)]
