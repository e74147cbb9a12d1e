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


def test_environment_yml_matches_pyproject():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = {_name(r) for r in py["dependencies"] + py["optional-dependencies"]["dev"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    got = {_name(r) for r in pip if not r.startswith("-e")}
    assert got == want, f"only in environment.yml: {got - want}; only in pyproject: {want - got}"


def test_python_dash_m_benchlib_is_the_cli():
    out = subprocess.run([sys.executable, "-m", "benchlib", "configs"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "fp16_naive_noscale" in out.stdout and "fp32_true -> fp32_baseline" in out.stdout


def test_ci_calls_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make test" in ci
