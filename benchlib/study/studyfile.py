"""Study files (``params/*.yaml``): a named matrix of scenarios x dtype configs x seeds, with
settings shared by every run and per-scenario overrides. A study expands to runs, each a fully
validated ``RunConfig``; a bad file fails before anything runs, naming the file, the key and the
valid values.

    study: smoke                      # name; default = the file's stem
    description: one line for the reader
    scenarios: [A, D]                 # or: all
    configs: [fp32_baseline, amp_bf16]  # or: full_matrix | core_six | all (also inside a list)
    seeds: [0, 1, 2]
    order: seeds                      # ``ORDERS``
    config_seeds: {bf16_no_compile: [0], C/amp_fp16: [0, 1, 2, 3]}  # fewer seeds (a subset), for a
                                      # config or for a config on one scenario (wins over the config's)
    notebook_seeds: [0]               # seeds whose runs execute a notebook (default: all); the
                                      # others run without one, a cell's seeds in one process
    analysis: [scenarios]             # ``ANALYSES``
    size: tiny                        # ... any RunConfig key: shared by every run
    overrides:                        # later wins: lm (A-B) / cls (C-F) < gpt2 (A, C, E) /
      lm: {batch_size: 12}            # roberta (B, D, F) < cls.gpt2 etc. < one scenario
      cls: {lr: 2.0e-5, roberta: {model_name_or_path: roberta-base}}   # roberta: = cls.roberta
      D: {steps: 20}

``pretrain:`` (arch -> run settings, or a list of phases run in order) trains each architecture's
LM scenario (A for GPT-2, B for RoBERTa) over the study's settings and overrides for it and saves
the model; ``model_name_or_path: pretrained`` then names the last phase's checkpoint for the run's
architecture. Phase k > 1 starts from phase k-1's checkpoint (so names no ``model_name_or_path``)
and takes ``scenario``, ``config`` and ``seed`` from phase 1 unless it sets them; every other key
comes from the study, then the phase's own keys.

``arms:`` (name -> settings laid over every run of the matrix, last; usually ``dist``, and an arm
may name its own ``config``) runs the matrix once per arm into ``runs/<arm>/...``, e.g.
``{single: {}, ddp_2: {dist: {strategy: ddp, nproc: 2}}}``. ``executor:``: where the sweep's runs
execute (``benchlib.study.executor``). The file is also a papermill parameters file (``-f``): the
training notebooks apply its settings and overrides for their own scenario.
"""
from __future__ import annotations

import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchlib.training.checkpoints import ARCH_NAME, ARCH_SCENARIOS, ARCHS, LM_SCENARIO, PRETRAINED
from benchlib.core.dtypes import ALIASES, REGISTRY, FULL_MATRIX, CORE_SIX, UnknownNameError, closest, get_config
from benchlib.core.runconfig import LEGACY_KEYS, ConfigError, RunConfig, flatten, paths_unchecked
from benchlib.core.scenarios import SCENARIOS, get_scenario
from benchlib.study.executor import ExecutorSettings

# Keys that describe the matrix; every other top-level key is a RunConfig setting.
STUDY_KEYS = ("study", "description", "scenarios", "configs", "seeds", "order", "config_seeds", "notebook_seeds",
              "overrides", "pretrain", "arms", "executor", "analysis")
ANALYSES = ("scenarios", "scaling", "arm-cost", "fp8-sizes", "serving", "horizon")
"""``analysis:`` what the analysis notebooks (``sweep.ANALYSIS_NOTEBOOKS``) answer: ``scenarios``
(per scenario, then across them; the default), ``scaling`` (one GPU against several; the default
with ``arms:``), ``arm-cost`` (each arm against the baseline arm), ``fp8-sizes`` (float8's
speed-up per model size), ``serving`` (trained in one precision, served in another), ``horizon``
(each config's gap to the reference against the training step)."""
ORDERS = ("seeds", "cells")
"""``order:`` ``seeds`` (the default): all of seed 0 before any of the next, so a study cut short
holds whole seeds; ``cells``: each (scenario, config)'s seeds (and arms) back to back, so the
later ones find the first one's graphs in the compile cache."""
# Set per run by the matrix (and by the sweep for out_dir), never by a setting.
RUN_IDENTITY = ("scenario", "config", "seed", "out_dir")
CONFIG_SETS = {"full_matrix": FULL_MATRIX, "core_six": CORE_SIX, "all": list(REGISTRY)}
"""Names a study's ``configs:`` may use for a set: seed 001's table, seed 002's core six, every config."""
RENAMED_SETS = {"seed001": "full_matrix", "seed002": "core_six"}
"""Set names of older study files, named in the error that refuses them."""
GROUPS = {"lm": ("A", "B"), "cls": ("C", "D", "E", "F")}
ARCH_GROUPS = dict(ARCH_SCENARIOS)  # gpt2: A, C, E; roberta: B, D, F


@dataclass(frozen=True)
class RunSpec:
    """One run of a study: its validated configuration, the parameters that produced it, its arm
    (None without arms) and whether it executes its notebook (``notebook_seeds``; one without
    runs in one process with the other such seeds of its cell)."""
    cfg: RunConfig
    params: dict = field(hash=False, compare=False)
    arm: str | None = None
    notebook: bool = True

    @property
    def run_id(self) -> str:
        return f"{self.arm}/{self.cfg.run_id}" if self.arm else self.cfg.run_id


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
    pretrain: dict = field(default_factory=dict)  # arch -> one settings dict per phase, in order
    arms: dict = field(default_factory=dict)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    config_seeds: dict = field(default_factory=dict)  # config or scenario/config -> its seeds, a subset of ``seeds``
    order: str = "seeds"
    analysis: list | None = None  # None: the default (``analyses``)
    notebook_seeds: list | None = None  # None: every seed

    @property
    def analyses(self) -> list[str]:
        """What the study's analysis answers: ``analysis:``, else ``scaling`` for a study with
        arms and ``scenarios`` for one without."""
        return self.analysis if self.analysis is not None else ["scaling" if self.arms else "scenarios"]

    def seeds_of(self, config: str, scenario: str | None = None) -> list[int]:
        """The seeds ``config`` runs (on ``scenario``): ``config_seeds``' ``scenario/config``, else its
        ``config``, else ``seeds``."""
        return self.config_seeds.get(f"{scenario}/{config}", self.config_seeds.get(config, self.seeds))

    @staticmethod
    def layers(scenario: str) -> list[str]:
        """The override keys that apply to a scenario, weakest first: lm / cls, gpt2 / roberta,
        cls.gpt2 etc., the scenario."""
        scn = get_scenario(scenario)
        family = next(g for g, members in GROUPS.items() if scn.id in members)
        return [family, scn.arch, f"{family}.{scn.arch}", scn.id]

    def run_params(self, scenario: str, config: str, seed: int) -> dict:
        """RunConfig keys of one run: the settings, then ``layers``' overrides."""
        sid = get_scenario(scenario).id
        d = dict(self.settings)
        for key in self.layers(sid):
            d.update(self.overrides.get(key, {}))
        extra = dict(d.get("extra") or {})
        extra["study"] = self.name
        d.update(scenario=sid, config=config, seed=seed, extra=extra)
        return d

    def source(self, scenario: str, key: str) -> str:
        """Where a scenario's value of ``key`` is set in the file (for error messages)."""
        for layer in reversed(self.layers(scenario)):
            if key in self.overrides.get(layer, {}):
                return f"overrides.{layer}.{key}"
        return key

    def needs_pretrained(self, scenario: str) -> str | None:
        """The arch whose pretrain checkpoint the scenario's runs load, else None."""
        scn = get_scenario(scenario)
        return scn.arch if self.run_params(scn.id, "", 0).get("model_name_or_path") == PRETRAINED else None

    def runs(self, checkpoints: dict[str, str] | None = None) -> list[RunSpec]:
        """Every run of the matrix, for each arm; ``checkpoints``: arch -> what ``pretrained`` means."""
        where = f"{self.path or self.name}: "
        out, cells = [], []
        for arm, over in (self.arms or {None: {}}).items():
            configs = over.get("configs", self.configs)
            here = f"{where}arms.{arm}: " if arm else where
            for k, s, c in self._matrix(configs):
                cells.append((s, c))
                d = self.run_params(s, c, k)
                d.update({key: v for key, v in over.items() if key != "configs"})
                if arm:
                    d["extra"] = {**d["extra"], "arm": arm}
                if checkpoints is not None and d.get("model_name_or_path") == PRETRAINED:
                    d["model_name_or_path"] = str(checkpoints[get_scenario(s).arch])
                nb = self.notebook_seeds is None or k in self.notebook_seeds
                with paths_unchecked():
                    out.append(RunSpec(RunConfig.from_dict(d, where=f"{here}{s}/{c}/seed{k}: "), d, arm, nb))
        if self.order == "cells" and self.arms:  # a cell's arms back to back too: a study cut short holds pairs
            first = {cell: i for i, cell in reversed(list(enumerate(cells)))}
            out = [run for _, run in sorted(zip(cells, out), key=lambda x: first[x[0]])]  # stable within a cell
        return out

    def _matrix(self, configs: list[str]) -> list[tuple[int, str, str]]:
        """(seed, scenario, config) of every run, in the study's ``order``."""
        if self.order == "cells":
            return [(k, s, c) for s in self.scenarios for c in configs for k in self.seeds_of(c, s)]
        return [(k, s, c) for k in self.seeds for s in self.scenarios for c in configs if k in self.seeds_of(c, s)]

    def pretrain_phases(self, arch: str) -> int:
        """How many runs (phases) pretrain ``arch``'s checkpoint."""
        return len(self.pretrain[arch])

    def pretrain_params(self, arch: str, phase: int = 1, start_from: str | None = None) -> dict:
        """Pretrain phase ``phase`` (1-based) of ``arch``: the study's settings and overrides for
        its LM scenario, then the phase's keys, ``save_model`` on; a later phase starts from
        ``start_from``, the previous phase's model directory."""
        spec = dict(self.pretrain[arch][phase - 1])
        d = self.run_params(spec.pop("scenario"), spec.pop("config"), spec.pop("seed"))
        if d.get("model_name_or_path") == PRETRAINED:
            d["model_name_or_path"] = None  # inherited from the study's settings: not for the stage that makes it
        extra = {**d["extra"], **(spec.pop("extra", None) or {}), "pretrain": arch}
        if self.pretrain_phases(arch) > 1:
            extra["pretrain_phase"] = phase
        d.update(spec)
        if phase > 1:
            d["model_name_or_path"] = start_from or f"<pretrain.{arch} phase {phase - 1}'s checkpoint>"
        d.update(save_model=True, extra=extra)
        return d

    def pretrain_run(self, arch: str, phase: int = 1, start_from: str | None = None) -> RunSpec:
        """One validated pretrain phase (see ``pretrain_params``)."""
        phased = f" (phase {phase})" if self.pretrain_phases(arch) > 1 else ""
        here = f"{self.path or self.name}: pretrain.{arch}{phased}: "
        d = self.pretrain_params(arch, phase, start_from)
        with paths_unchecked():
            cfg = RunConfig.from_dict(d, where=here)
        if cfg.dist.strategy not in ("single", "ddp"):
            raise ConfigError(f"{here}dist.strategy {cfg.dist.strategy!r} shards the parameters and a "
                              f"sharded model is not saved; use strategy single or ddp for the pretrain stage")
        return RunSpec(cfg, d)

    def pretrain_runs(self) -> dict[str, list[RunSpec]]:
        """arch -> its validated pretrain phases in order, GPT-2 first."""
        return {arch: [self.pretrain_run(arch, k) for k in range(1, self.pretrain_phases(arch) + 1)]
                for arch in ARCHS if arch in self.pretrain}

    def check_pretrained(self) -> None:
        """Every run whose ``model_name_or_path`` is ``pretrained`` has its arch's pretrain stage."""
        where = f"{self.path or self.name}: "
        for s in self.scenarios:
            arch = self.needs_pretrained(s)
            if arch and arch not in self.pretrain:
                raise ConfigError(
                    f"{where}{self.source(s, 'model_name_or_path')}: {PRETRAINED!r} for scenario {s} needs a "
                    f"pretrain.{arch} section (the {ARCH_NAME[arch]} checkpoint), e.g. pretrain: {{{arch}: "
                    f"{{scenario: {LM_SCENARIO[arch]}, config: amp_bf16, steps: 2000}}}}; or name a checkpoint "
                    f"(a hub id or a directory)")


class StudyLoader(yaml.SafeLoader):
    """The safe YAML loader, but a key written twice in one mapping is an error naming the key and
    both lines (the safe loader keeps the last value: one of two settings would vanish unsaid)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if isinstance(key, (str, int, float, bool)) and key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {seen[key]}): keep one",
                        key_node.start_mark)
                if isinstance(key, (str, int, float, bool)):
                    seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """A study file's YAML (``StudyLoader``); what is not YAML text is one line naming the file."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=StudyLoader)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a text file (byte {e.object[e.start]:#04x} at offset {e.start} is not "
                          f"UTF-8): a study file is YAML text, e.g. params/smoke.yaml") from None
    except yaml.YAMLError as e:  # its message spans lines (a snippet with a caret): keep the facts
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(str(getattr(e, "problem", None) or e).split())
        context = getattr(e, "context", None)
        raise ConfigError(f"{path}: not a valid (safe) YAML file{where}: {what}" + (f" ({context})" if context else "")) from None


def load_study(path: str | Path) -> Study:
    """Read a study file with the safe YAML loader (``read_yaml``) and validate every run it expands to."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no study file {str(path)!r}")
    d = read_yaml(path)
    with paths_unchecked():  # a corpus must exist when its runs execute (sweep), not for the others
        study = parse_study(d, where=f"{path}: ", default_name=path.stem)
    study.path = path
    study.check_pretrained()
    study.pretrain_runs()
    study.runs()  # validate every expanded run now, before anything executes
    return study


def parse_study(d: Any, where: str = "", default_name: str = "study") -> Study:
    if not isinstance(d, dict):
        raise ConfigError(f"{where}a study file is a mapping of keys to values, got {type(d).__name__}")
    valid = list(STUDY_KEYS) + [k for k in setting_keys() if k not in RUN_IDENTITY]
    for k in d:
        if k in RUN_IDENTITY:
            raise ConfigError(f"{where}{k!r} is set per run; use {k + 's'!r} for the matrix"
                              if k != "out_dir" else f"{where}'out_dir' is set by the sweep")
        if k not in valid:
            raise ConfigError(f"{where}unknown key {k!r}.{closest(str(k), valid)} Valid: {', '.join(valid)}")
    settings = {k: v for k, v in d.items() if k not in STUDY_KEYS}
    _check_settings(settings, where)  # types and values of the shared settings
    name = d.get("study", default_name)
    if not _folder_name(name):
        raise ConfigError(f"{where}study: a plain folder name is expected, got {name!r}")
    configs, seeds = _configs(d.get("configs", "full_matrix"), where), _study_seeds(d.get("seeds", [0]), where)
    scenarios = _scenarios(d.get("scenarios", "all"), where)
    return Study(name=name, scenarios=scenarios, configs=configs, seeds=seeds,
                 config_seeds=_config_seeds(d.get("config_seeds"), configs, seeds, where, scenarios),
                 notebook_seeds=_notebook_seeds(d.get("notebook_seeds"), seeds, where), order=_order(d.get("order"), where),
                 settings=settings, overrides=_overrides(d.get("overrides") or {}, where),
                 description=str(d.get("description", "")), pretrain=_pretrain(d.get("pretrain"), where),
                 arms=_arms(d.get("arms"), where, bool(d.get("pretrain"))),
                 executor=ExecutorSettings.from_dict(d.get("executor"), where),
                 analysis=_analysis(d.get("analysis"), where))


def _analysis(v: Any, where: str) -> list[str] | None:
    """``analysis:`` one name of ``ANALYSES`` or a list of them (None: the default)."""
    if v is None:
        return None
    names = [v] if isinstance(v, str) else v
    if not isinstance(names, list) or not names:
        raise ConfigError(f"{where}analysis: expected a name or a list of names of {', '.join(ANALYSES)}, got {v!r}")
    for n in names:
        if n not in ANALYSES:
            raise ConfigError(f"{where}analysis: {n!r} is not an analysis. Valid: {', '.join(ANALYSES)}."
                              + closest(str(n), list(ANALYSES)))
    return list(dict.fromkeys(names))


def setting_keys() -> list[str]:
    """Keys a study file, an override or an arm may set: RunConfig's fields, its
    sub-configurations' dotted keys and their older flat spellings."""
    import dataclasses
    return list(dict.fromkeys([f.name for f in dataclasses.fields(RunConfig)] + RunConfig.keys() + list(LEGACY_KEYS)))


def _check_settings(settings: dict, where: str) -> None:
    try:
        RunConfig.from_dict(settings, where=where)
    except ConfigError as e:
        raise ConfigError(f"{e}{_number_hint(settings, str(e))}") from None


def _number_hint(settings: dict, message: str) -> str:
    """Where the error is of a number that YAML read as text (written in quotes), how to write it."""
    for k, v in flatten(settings).items():
        if not (isinstance(v, str) and _is_number(v) and message.find(f"{k}={v!r}") >= 0):
            continue
        try:
            tp = RunConfig.field_type(k)
        except KeyError:
            return ""
        if int in (tp, *typing.get_args(tp)):
            digits = v if v.strip().lstrip("+-").isdigit() else f"{float(v):.0f}"  # 1e3: 1000
            return f" (YAML reads {v!r} as text: {k} must be an integer, written without quotes, e.g. {k}: {digits})"
        return f" (YAML reads {v!r} as text: write the number without quotes, e.g. {k}: {v})"
    return ""


def _folder_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and "/" not in name and not name.startswith(".")


def _mapping(v: Any, here: str, what: str) -> dict:
    """A copy of ``v``, a mapping (None: empty), else a one-line error."""
    if not (v is None or isinstance(v, dict)):
        raise ConfigError(f"{here}expected a mapping of {what}")
    return dict(v or {})


def _subset(v: Any, seeds: list[int], here: str) -> list[int]:
    """``v``, seeds of the study (``[]`` allowed)."""
    ks = [] if v == [] else _seeds(v, here)
    extra = [k for k in ks if k not in seeds]
    if extra:
        raise ConfigError(f"{here}seed {extra[0]} is not one of the study's seeds {seeds}")
    return ks


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


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
            hint = (f" Did you mean {RENAMED_SETS[c]!r}? (the set was renamed)" if isinstance(c, str) and c in RENAMED_SETS
                    else closest(str(c), valid))
            raise ConfigError(f"{where}configs: unknown dtype config {c!r}.{hint} "
                              f"Valid: {', '.join(valid)}") from None
    return list(dict.fromkeys(out))


def _seeds(v: Any, where: str) -> list[int]:
    seeds = _as_list(v, "seeds", where)
    bad = [s for s in seeds if not isinstance(s, int) or isinstance(s, bool) or s < 0]
    if bad:
        raise ConfigError(f"{where}seeds: expected a list of non-negative integers, e.g. [0, 1, 2]; got {bad[0]!r}")
    return list(dict.fromkeys(seeds))


def _study_seeds(v: Any, where: str) -> list[int]:
    """The study's ``seeds:``, a list: a bare number could mean that seed or that many, and a seed
    listed twice is a typo for another (both are refused, not read one way silently)."""
    if isinstance(v, int) and not isinstance(v, bool):
        raise ConfigError(f"{where}seeds: {v} could be seed {v} or {v} seeds: write a list, [{v}] for the one seed "
                          f"or {list(range(v))} for {v} seeds")
    twice = [s for i, s in enumerate(v) if s in v[:i]] if isinstance(v, list) else []
    if twice:
        raise ConfigError(f"{where}seeds: {twice[0]!r} is listed twice in {v}")
    return _seeds(v, where)


def _order(v: Any, where: str) -> str:
    if v is None:
        return "seeds"
    if v not in ORDERS:
        raise ConfigError(f"{where}order: expected one of {', '.join(ORDERS)}, got {v!r}")
    return v


def _notebook_seeds(v: Any, seeds: list[int], where: str) -> list[int] | None:
    """``notebook_seeds:`` a subset of the study's seeds (None: all of them; []: none)."""
    return None if v is None else _subset(v, seeds, f"{where}notebook_seeds: ")


def _config_seeds(v: Any, configs: list[str], seeds: list[int], where: str, scenarios: list[str] = ()) -> dict:
    """``config_seeds:`` config (or scenario/config) -> its seeds: a config (and scenario) of the
    study, a subset of its seeds."""
    if v is None:
        return {}
    here = f"{where}config_seeds: "
    if not isinstance(v, dict):
        raise ConfigError(f"{here}expected a mapping of config to seeds, e.g. {{bf16_no_compile: [0]}}")
    out = {}
    for key, ks in v.items():
        s, _, c = str(key).rpartition("/")
        if s and s not in scenarios:
            raise ConfigError(f"{here}{key!r}: {s!r} is not one of the study's scenarios ({', '.join(scenarios)})")
        if c not in configs:
            raise ConfigError(f"{here}{key!r}: {c!r} is not one of the study's configs.{closest(c, configs)}")
        out[str(key)] = _subset(_seeds(ks, f"{here}{key}: "), seeds, f"{here}{key}: ")
    return out


def _overrides(v: Any, where: str) -> dict:
    """lm, cls, gpt2, roberta, A-F -> settings; an arch block inside lm / cls (``cls: {gpt2:
    {...}}``) is stored as ``cls.gpt2``."""
    if not isinstance(v, dict):
        raise ConfigError(f"{where}overrides: expected a mapping of scenario (A-F, lm, cls, gpt2, roberta) to settings")
    valid = list(GROUPS) + list(SCENARIOS) + list(ARCH_GROUPS)
    out = {}
    for key, settings in v.items():
        k = str(key)
        k = k if k in GROUPS else k.lower() if k.lower() in ARCH_GROUPS else k.upper()
        if k not in valid:  # a one-letter key is a scenario id: the closest is one too
            pool = list(SCENARIOS) if len(k) == 1 else valid
            raise ConfigError(f"{where}overrides: unknown scenario {key!r}.{closest(str(key), pool)} "
                              f"Valid: {', '.join(valid)}")
        settings = _override_block(settings, f"{where}overrides.{key}: ")
        if k in GROUPS:
            for arch in ARCH_GROUPS:
                if arch in settings:
                    out[f"{k}.{arch}"] = _override_block(settings.pop(arch), f"{where}overrides.{key}.{arch}: ")
                    _check_settings(out[f"{k}.{arch}"], f"{where}overrides.{key}.{arch}: ")
        _check_settings(settings, f"{where}overrides.{key}: ")  # unknown keys and types, with this location
        out[k] = settings
    return out


def _override_block(settings: Any, here: str) -> dict:
    if not isinstance(settings, dict):
        raise ConfigError(f"{here}expected a mapping of settings, got {settings!r}")
    for ident in RUN_IDENTITY:
        if ident in settings:
            raise ConfigError(f"{here}{ident!r} cannot be overridden per scenario")
    return dict(settings)


def _pretrain(v: Any, where: str) -> dict:
    """``pretrain:`` arch -> the settings of the runs that make that arch's checkpoint, one per
    phase (a mapping is one phase), each with its scenario, config and seed filled in: phase 1's
    default to A / B, the RunConfig default config and seed 0; a later phase's to phase 1's."""
    if v is None:
        return {}
    example = "e.g. pretrain: {gpt2: {scenario: A, config: amp_bf16, steps: 2000}}"
    if not isinstance(v, dict):
        raise ConfigError(f"{where}pretrain: expected a mapping of architecture (gpt2, roberta) to run settings, {example}")
    out = {}
    for key, spec in v.items():
        arch = str(key).lower()
        if arch not in ARCHS:
            raise ConfigError(f"{where}pretrain: unknown architecture {key!r}.{closest(str(key), list(ARCHS))} "
                              f"Valid: {', '.join(ARCHS)}")
        spec = spec if isinstance(spec, list) else [spec]
        if not spec:
            raise ConfigError(f"{where}pretrain.{key}: an empty list of phases; give one mapping of run settings "
                              f"per phase, or one mapping for a single run, {example}")
        out[arch] = []
        for k, phase in enumerate(spec, 1):
            here = f"{where}pretrain.{key} (phase {k}): " if len(spec) > 1 else f"{where}pretrain.{key}: "
            out[arch].append(_pretrain_phase(phase, arch, here, example, out[arch][0] if out[arch] else None, k))
    return out


def _pretrain_phase(spec: Any, arch: str, here: str, example: str, first: dict | None = None, k: int = 1) -> dict:
    """One pretrain run's settings, checked, with scenario, config and seed filled in (from
    ``first``, phase 1's, for a later phase)."""
    spec = _mapping(spec, here, f"run settings, {example}")
    if "out_dir" in spec:
        raise ConfigError(f"{here}'out_dir' is set by the sweep")
    if spec.get("save_model", True) is not True:
        raise ConfigError(f"{here}save_model: a pretrain run always saves its model")
    if first is not None and "model_name_or_path" in spec:
        raise ConfigError(f"{here}model_name_or_path: phase {k} starts from phase {k - 1}'s checkpoint; name a "
                          f"starting checkpoint in phase 1 only")
    if spec.get("model_name_or_path") == PRETRAINED:
        raise ConfigError(f"{here}model_name_or_path: {PRETRAINED!r} is what this stage makes; give a hub id or a "
                          f"directory to start from, or leave it out to train from scratch")
    try:
        sid = get_scenario(str(spec.get("scenario", first["scenario"] if first else LM_SCENARIO[arch]))).id
    except UnknownNameError as e:
        raise ConfigError(f"{here}scenario: {e}") from None
    if first is not None and sid != first["scenario"]:
        raise ConfigError(f"{here}scenario {sid!r}: every phase trains the same scenario, phase 1's "
                          f"{first['scenario']!r}")
    if sid != LM_SCENARIO[arch]:
        raise ConfigError(f"{here}scenario {sid!r}: the {ARCH_NAME[arch]} checkpoint is pretrained on scenario "
                          f"{LM_SCENARIO[arch]} (its language-model task); "
                          + ", ".join(f"{a}: {LM_SCENARIO[a]}" for a in ARCHS))
    spec["scenario"] = sid
    config = spec.get("config", first["config"] if first else RunConfig().config)
    if not isinstance(config, str) or config in CONFIG_SETS:
        raise ConfigError(f"{here}config: one dtype config name, got {config!r}")
    spec["config"] = _configs(config, here)[0]
    spec["seed"] = _seeds(spec.get("seed", first["seed"] if first else 0), here)[0]
    _check_settings({key: x for key, x in spec.items() if key not in ("scenario", "config", "seed")}, here)
    return spec


def _arms(v: Any, where: str, has_pretrain: bool) -> dict:
    """``arms:`` name -> settings (any RunConfig key but scenario / seed / out_dir; ``config`` or
    ``configs`` replaces the study's configs for that arm)."""
    if v is None:
        return {}
    example = "e.g. arms: {single: {}, ddp_2: {dist: {strategy: ddp, nproc: 2}}}"
    if not isinstance(v, dict) or not v:
        raise ConfigError(f"{where}arms: expected a mapping of arm name to settings, {example}")
    if has_pretrain:
        raise ConfigError(f"{where}arms and pretrain cannot be combined: pretrain a checkpoint in one study, "
                          f"compare strategies on it in another")
    out = {}
    for name, settings in v.items():
        here = f"{where}arms.{name}: "
        if not _folder_name(name) or name == "pretrain":
            raise ConfigError(f"{here}an arm's name is a plain folder name, got {name!r}")
        settings = _mapping(settings, here, f"settings, {example}")
        for ident in ("scenario", "seed", "out_dir"):
            if ident in settings:
                raise ConfigError(f"{here}{ident!r} cannot be set per arm")
        if "config" in settings or "configs" in settings:
            settings["configs"] = _configs(settings.pop("configs", None) or settings.pop("config"), here)
            settings.pop("config", None)
        _check_settings({k: x for k, x in settings.items() if k != "configs"}, here)
        out[name] = settings
    return out
