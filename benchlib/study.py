"""Study files (``params/*.yaml``): a named matrix of scenarios x dtype configs x seeds,
with settings shared by every run and per-scenario overrides. A study expands to runs,
each a fully validated ``RunConfig``; a bad file fails before anything runs, naming the
file, the key and the valid values.

    study: smoke                      # name; default = the file's stem
    description: one line for the reader
    scenarios: [A, D]                 # or: all
    configs: [fp32_baseline, amp_bf16]  # or: seed001 | seed002 | all (also inside a list)
    seeds: [0, 1, 2]
    size: tiny                        # ... any RunConfig key: shared by every run
    steps: 30
    overrides:                        # lm (A-B) < cls (C-F) < one scenario: later wins
      lm: {batch_size: 12, grad_accum: 5}
      D: {steps: 20}

The same file is also a papermill parameters file (``papermill ... -f params/smoke.yaml``):
the training notebooks apply its settings and overrides for their own scenario.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .configs import ALIASES, REGISTRY, SEED001, SEED002, UnknownNameError, closest, get_config
from .runconfig import ConfigError, RunConfig
from .scenarios import SCENARIOS, get_scenario

# Keys that describe the matrix; every other top-level key is a RunConfig setting.
STUDY_KEYS = ("study", "description", "scenarios", "configs", "seeds", "overrides")
# Set per run by the matrix (and by the sweep for out_dir), never by a setting.
RUN_IDENTITY = ("scenario", "config", "seed", "out_dir")
CONFIG_SETS = {"seed001": SEED001, "seed002": SEED002, "all": list(REGISTRY)}
GROUPS = {"lm": ("A", "B"), "cls": ("C", "D", "E", "F")}


@dataclass(frozen=True)
class RunSpec:
    """One run of a study: its validated configuration and the parameters that produced it."""
    cfg: RunConfig
    params: dict = field(hash=False, compare=False)

    @property
    def run_id(self) -> str:
        return self.cfg.run_id


@dataclass
class Study:
    name: str
    scenarios: list[str]
    configs: list[str]
    seeds: list[int]
    settings: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    description: str = ""
    path: Path | None = None

    def run_params(self, scenario: str, config: str, seed: int) -> dict:
        """RunConfig keys of one run: settings < lm/cls overrides < the scenario's overrides."""
        sid = get_scenario(scenario).id
        d = dict(self.settings)
        for group, members in GROUPS.items():
            if sid in members:
                d.update(self.overrides.get(group, {}))
        d.update(self.overrides.get(sid, {}))
        extra = dict(d.get("extra") or {})
        extra["study"] = self.name
        d.update(scenario=sid, config=config, seed=seed, extra=extra)
        return d

    def runs(self) -> list[RunSpec]:
        where = f"{self.path or self.name}: "
        out = []
        for s in self.scenarios:
            for c in self.configs:
                for k in self.seeds:
                    d = self.run_params(s, c, k)
                    out.append(RunSpec(RunConfig.from_dict(d, where=f"{where}{s}/{c}/seed{k}: "), d))
        return out


def load_study(path: str | Path) -> Study:
    """Read a study file with the safe YAML loader and validate every run it expands to."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no study file {str(path)!r}")
    try:
        d = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not a valid (safe) YAML file: {e}") from None
    study = parse_study(d, where=f"{path}: ", default_name=path.stem)
    study.path = path
    study.runs()  # validate every expanded run now, before anything executes
    return study


def parse_study(d: Any, where: str = "", default_name: str = "study") -> Study:
    if not isinstance(d, dict):
        raise ConfigError(f"{where}a study file is a mapping of keys to values, got {type(d).__name__}")
    valid = list(STUDY_KEYS) + [k for k in RunConfig.keys() if k not in RUN_IDENTITY]
    for k in d:
        if k in RUN_IDENTITY:
            raise ConfigError(f"{where}{k!r} is set per run; use {_plural(k)!r} for the matrix"
                              if k != "out_dir" else f"{where}'out_dir' is set by the sweep")
        if k not in valid:
            raise ConfigError(f"{where}unknown key {k!r}.{closest(str(k), valid)} Valid: {', '.join(valid)}")
    settings = {k: v for k, v in d.items() if k not in STUDY_KEYS}
    _check_settings(settings, where)  # types and values of the shared settings
    name = d.get("study", default_name)
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ConfigError(f"{where}study: a plain folder name is expected, got {name!r}")
    return Study(name=name, scenarios=_scenarios(d.get("scenarios", "all"), where),
                 configs=_configs(d.get("configs", "seed001"), where), seeds=_seeds(d.get("seeds", [0]), where),
                 settings=settings, overrides=_overrides(d.get("overrides") or {}, where),
                 description=str(d.get("description", "")))


def _check_settings(settings: dict, where: str) -> None:
    try:
        RunConfig.from_dict(settings, where=where)
    except ConfigError as e:
        # YAML 1.1 reads 1e-3 as text; say so rather than leave "expected float" a puzzle
        text = [f"{k}: {v}" for k, v in settings.items() if isinstance(v, str) and _is_number(v)]
        hint = f" (YAML reads {text[0]!r} as text: write the number with a dot, e.g. 1.0e-3)" if text else ""
        raise ConfigError(f"{e}{hint}") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _plural(k: str) -> str:
    return {"scenario": "scenarios", "config": "configs", "seed": "seeds"}[k]


def _as_list(v: Any, key: str, where: str) -> list:
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or not v:
        raise ConfigError(f"{where}{key}: expected a non-empty list, got {v!r}")
    return v


def _scenarios(v: Any, where: str) -> list[str]:
    if v == "all":
        return list(SCENARIOS)
    out = []
    for s in _as_list(v, "scenarios", where):
        try:
            out.append(get_scenario(str(s)).id)
        except UnknownNameError as e:
            raise ConfigError(f"{where}scenarios: {e} (or 'all')") from None
    return list(dict.fromkeys(out))


def _configs(v: Any, where: str) -> list[str]:
    names: list[str] = []
    for c in _as_list(v, "configs", where):
        names += CONFIG_SETS.get(c, [c]) if isinstance(c, str) else [c]
    out = []
    for c in names:
        try:
            out.append(get_config(str(c)).name)  # aliases (fp32_true) -> the canonical name
        except UnknownNameError:
            valid = list(CONFIG_SETS) + list(REGISTRY) + list(ALIASES)
            raise ConfigError(f"{where}configs: unknown dtype config {c!r}.{closest(str(c), valid)} "
                              f"Valid: {', '.join(valid)}") from None
    return list(dict.fromkeys(out))


def _seeds(v: Any, where: str) -> list[int]:
    seeds = _as_list(v, "seeds", where)
    bad = [s for s in seeds if not isinstance(s, int) or isinstance(s, bool) or s < 0]
    if bad:
        raise ConfigError(f"{where}seeds: expected a list of non-negative integers, e.g. [0, 1, 2]; got {bad[0]!r}")
    return list(dict.fromkeys(seeds))


def _overrides(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise ConfigError(f"{where}overrides: expected a mapping of scenario (A-F, lm, cls) to settings")
    valid = list(GROUPS) + list(SCENARIOS)
    out = {}
    for key, settings in v.items():
        k = key if key in GROUPS else str(key).upper()
        if k not in valid:
            raise ConfigError(f"{where}overrides: unknown scenario {key!r}.{closest(str(key), valid)} "
                              f"Valid: {', '.join(valid)}")
        if not isinstance(settings, dict):
            raise ConfigError(f"{where}overrides.{key}: expected a mapping of settings, got {settings!r}")
        here = f"{where}overrides.{key}: "
        for ident in RUN_IDENTITY:
            if ident in settings:
                raise ConfigError(f"{here}{ident!r} cannot be overridden per scenario")
        _check_settings(settings, here)  # unknown keys and types, with this location
        out[k] = dict(settings)
    return out
