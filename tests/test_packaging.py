"""The conda environment and pyproject list the same dependencies; the CLI entry points exist."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _extra(py: dict, name: str) -> list[str]:
    """An extra's requirements, those of the extras it names (``dtype-bench[study]``) spelled out."""
    out = []
    for req in py["optional-dependencies"][name]:
        if _name(req) == py["name"]:
            for other in req[req.index("[") + 1:req.index("]")].split(","):
                out += _extra(py, other.strip())
        else:
            out.append(req)
    return out


def test_environment_yml_matches_pyproject():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = {_name(r) for r in py["dependencies"] + _extra(py, "dev")}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    got = {_name(r) for r in pip if not r.startswith("-e")}
    assert got == want, f"only in environment.yml: {got - want}; only in pyproject: {want - got}"


def test_the_dev_extra_holds_the_tools_notebook_stack():
    """``.[dev]`` (make setup) installs what the tool runs notebooks with; the core list does not."""
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    study = {_name(r) for r in py["optional-dependencies"]["study"]}
    assert {"papermill", "nbformat", "nbconvert", "jupyterlab"} <= study
    assert study <= {_name(r) for r in _extra(py, "dev")}
    assert not study & {_name(r) for r in py["dependencies"]}


def test_the_console_script_is_the_tools_cli():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert py["scripts"]["dtype-bench"] == "dtype_bench.cli:main"


def test_python_dash_m_dtype_bench_is_the_cli():
    out = subprocess.run([sys.executable, "-m", "dtype_bench", "configs"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "fp16_naive_noscale" in out.stdout and "fp32_true -> fp32_baseline" in out.stdout


def test_ci_calls_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make test" in ci
