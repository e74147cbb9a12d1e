"""Helpers the notebooks call, so that their cells stay short: show the environment, validate
the injected parameters, train, plot the curves, show the result.
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchlib.core.runconfig import ConfigError, ResolvedRun, RunConfig, resolved
from benchlib.core.env import STATIC_CHARTS_ENV
from benchlib.core.records import fmt
from benchlib.study.studyfile import GROUPS, RUN_IDENTITY, STUDY_KEYS, parse_study

NOTEBOOK_FOR = {"lm": "01_train_lm.ipynb", "cls": "02_train_cls.ipynb"}
REPLAY_ENV = "DTYPE_BENCH_REPLAY"
"""Set (by ``dtype-bench compact --replay``): ``train`` renders the run's finished record and step
log instead of training, for a run that trained without a notebook (a cell run)."""
_IPYTHON_NAMES = {"In", "Out", "exit", "quit", "get_ipython"}
_PARAM_TYPES = (str, int, float, bool, type(None), dict, list)


def show_environment(when: bool = True) -> None:
    """Print where this notebook runs: device, versions, commit, date. ``when=False`` (analysis
    notebooks) leaves out date and host, so the same records at the same commit give the same
    notebook."""
    from benchlib.core import env
    pd.set_option("display.max_colwidth", 200)
    if os.environ.get(REPLAY_ENV):
        print("replay:    this notebook renders a finished run's record and step log, it does not train; the "
              "run's own GPU, versions, commit and date are printed under 1. Train")
        return
    device = env.pick_device("auto")
    e = env.environment(device)
    gpu = f"{e['device_name']} x{e['device_count']} (capability {e.get('capability')})" if device.type == "cuda" \
        else f"none; training on {e['device_name']}"
    print(f"GPU:       {gpu}")
    print("versions:  " + ", ".join(f"{k} {e[k]}" for k in ("python", "torch", "cuda", "transformers",
                                                             "bitsandbytes", "torchao") if e.get(k)))
    if when:
        print(f"commit:    {e['git_commit']}   date: {e['date']}   host: {e['hostname']}")
    else:
        print(f"code:      {env.git_commit(code_only=True)} (the last commit of {', '.join(env.CODE_PATHS)})")


def repo_path(path: str | Path) -> str:
    """A path as a notebook shows it: relative to the repository when inside it."""
    from benchlib.core.env import REPO_ROOT
    p = Path(path).resolve()
    try:
        return p.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def notebook_params(namespace: dict) -> dict:
    """The plain-data globals of a notebook: its parameters and what papermill injected."""
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and k not in _IPYTHON_NAMES and isinstance(v, _PARAM_TYPES)}


def validate_params(namespace: dict, family: str | None = None) -> ResolvedRun:
    """The notebook's parameters as a ``ResolvedRun``; an unknown key or bad value fails, named.
    ``run_config`` (a sweep's) stands for every other parameter; a study file given with
    ``papermill -f`` contributes its settings and overrides for this notebook's scenario."""
    params = notebook_params(namespace)
    given = params.pop("run_config", None)
    meta = {k: params.pop(k) for k in STUDY_KEYS if k in params}
    where = "notebook parameters: "
    if given is not None:
        d = given
    elif meta:
        ident = {k: params.pop(k) for k in RUN_IDENTITY if k in params}
        study = parse_study({**meta, **params}, where=f"{where}(study file) ")
        try:
            dflt = RunConfig()
            d = study.run_params(ident.get("scenario", dflt.scenario), ident.get("config", dflt.config),
                                 ident.get("seed", dflt.seed))
        except ValueError as e:
            raise ConfigError(f"{where}{e}") from None
        d["out_dir"] = ident.get("out_dir")
    else:
        d = params
    cfg = RunConfig.from_dict(d, where=where)
    if family and cfg.scenario not in GROUPS[family]:
        other = next(f for f in GROUPS if f != family)
        raise ConfigError(f"{where}scenario={cfg.scenario!r}: this notebook trains scenarios "
                          f"{', '.join(GROUPS[family])}; use {NOTEBOOK_FOR[other]} for {', '.join(GROUPS[other])}")
    return resolved(cfg)


SHOWN = ("scenario", "config", "seed", "size", "steps", "batch_size", "grad_accum", "seq_len", "lr", "data",
         "device", "compile")


def show_config(cfg: ResolvedRun) -> pd.DataFrame:
    """The run's main settings and any other that differs from its default, then the dtype
    configuration's fields."""
    r, defaults = cfg.to_dict(), RunConfig().to_dict()
    keys = list(SHOWN) + [k for k in r if k not in SHOWN and r[k] != defaults[k]]
    print(f"{cfg.run_id}: {cfg.dtype.description}")
    rows = [("run", k, r[k]) for k in keys]
    rows += [("dtype", k, v) for k, v in cfg.dtype.to_dict().items() if k not in ("name", "description")]
    return pd.DataFrame(rows, columns=["of", "setting", "value"]).set_index(["of", "setting"])


def default_out_dir(cfg: RunConfig, many: bool = False) -> Path:
    """Where a run's record goes without ``out_dir``: the kernel's working directory (beside the
    executed notebook), but the git-ignored ``runs/<run id>/`` from the repository's root or its
    ``notebooks/`` folder, so the sources stay clean."""
    here = Path.cwd()
    if (here / NOTEBOOK_FOR["lm"]).exists() and (here.parent / "benchlib").is_dir():
        return here.parent / "runs" / cfg.run_id
    if (here / "notebooks" / NOTEBOOK_FOR["lm"]).exists() and (here / "benchlib").is_dir():
        return here / "runs" / cfg.run_id
    return here / cfg.run_id if many else here


@dataclass
class TrainResult:
    record: dict
    steps: pd.DataFrame
    out_dir: Path

    @property
    def path(self) -> Path:
        return self.out_dir / "result.json"


def train(cfg: RunConfig, out_dir: str | Path | None = None, many: bool = False) -> TrainResult:
    """Train one run (progress bar while it runs) and load its record and step log."""
    from tqdm import TqdmWarning

    from benchlib.core.records import read_steps
    from benchlib.training.loop import run
    out = Path(out_dir or cfg.out_dir or default_out_dir(cfg, many))
    if os.environ.get(REPLAY_ENV):
        return replay(cfg, out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)  # "IProgress not found": the text bar is fine
        rec = run(cfg, out_dir=out, progress=True)
    steps_file = out / "steps.jsonl"
    steps = pd.DataFrame(read_steps(steps_file)) if steps_file.exists() else pd.DataFrame()
    line = f"{rec['run_id']}: {rec['status']} in {rec['wall_s']:.1f} s"
    if rec["reason"]:
        line += "\n  " + rec["reason"].strip().replace("\n", "\n  ")
    print(line + f"\nrecord: {out / 'result.json'}")
    return TrainResult(rec, steps, out)


def replay(cfg: RunConfig, out: Path) -> TrainResult:
    """The finished run in ``out`` as ``train`` would have returned it, read from its record (its
    ``result.json``, or its row in a compacted study's records table) and step log; what trained it,
    where and when, printed from the record."""
    from benchlib.core.records import RESULT, load_records, read_steps
    rec = next((r for r in load_records(_records_root(out)) if Path(r["_path"]).resolve() == (out / RESULT).resolve()),
               None)
    if rec is None or rec.get("run_id") != cfg.run_id:
        raise ConfigError(f"{REPLAY_ENV}: no finished record of {cfg.run_id} in {out}")
    e = rec.get("env", {})
    how = "in a cell process without a notebook, " if (rec.get("sweep") or {}).get("notebook") is False else ""
    print(f"{rec['run_id']}: replayed, not trained here. It trained {how}on {e.get('device_name', '?')}, torch "
          f"{e.get('torch', '?')}, commit {e.get('git_commit', '?')}, {e.get('date', '?')}: {rec['status']} in "
          f"{rec['wall_s']:.1f} s")
    if rec.get("reason"):
        print("  " + rec["reason"].strip().replace("\n", "\n  "))
    return TrainResult(rec, pd.DataFrame(read_steps(out / "steps.jsonl")), out)


def _records_root(out: Path) -> Path:
    """The run folder, or the compacted study above it whose records table holds its record."""
    from benchlib.core.records import RECORDS_TABLE, RESULT
    if (out / RESULT).is_file():
        return out
    return next((up for up in list(out.parents)[:6] if (up / RECORDS_TABLE).is_file()), out)


def compare_configs(scenario: str, configs: list[str], **settings) -> list[RunConfig]:
    """The quickstart's comparison: one validated run per dtype config, settings shared."""
    return [RunConfig.from_dict({**settings, "scenario": scenario, "config": c}, where="quickstart parameters: ")
            for c in configs]


def dtype_table(cfgs: list[RunConfig]) -> pd.DataFrame:
    """What each compared configuration changes (``dtype-bench configs`` shows them all)."""
    from benchlib.core.dtypes import config_table
    return config_table().loc[[c.dtype.name for c in cfgs]]


# ---- charts --------------------------------------------------------------------------
CURVES = {"loss": "training loss", "grad_norm": "gradient L2 norm (pre-clip)", "loss_scale": "loss scale"}


MAX_POINTS = 120
"""A curve's points at most: longer logs are binned by step (``curves_frame``)."""
BIN_AGG = {"loss": "mean", "grad_norm": "max", "loss_scale": "min"}
"""How a bin summarises its steps (a gradient spike and a loss-scale back-off stay visible)."""


def curves_frame(steps: pd.DataFrame, label: str = "", max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Tidy (step, metric, value, run) rows of the step log, finite values only, ``bin_curves``-binned."""
    if steps.empty or "loss" not in steps:
        return pd.DataFrame(columns=["step", "metric", "value", "run"])
    train_rows = steps[steps["eval"].isna()] if "eval" in steps else steps  # eval rows hold no loss
    cols = [c for c in CURVES if c in train_rows]
    long = train_rows.melt(id_vars="step", value_vars=cols, var_name="metric", value_name="value")
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    long = long[long["value"].map(math.isfinite)]
    return bin_curves(long.assign(run=label), max_points)


def bin_curves(long: pd.DataFrame, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """``curves_frame``'s rows binned by step (``BIN_AGG``) to at most ``max_points`` per (run,
    metric), ``step`` each bin's first."""
    width = math.ceil(long.groupby(["run", "metric"])["step"].nunique().max() / max_points) if len(long) else 1
    if width <= 1:
        return long
    binned = long.assign(step=long["step"] // width * width)
    return pd.concat([d.groupby(["run", "step"], as_index=False)["value"].agg(BIN_AGG.get(m, "mean")).assign(metric=m)
                      for m, d in binned.groupby("metric", sort=False)], ignore_index=True)


def curves_chart(frame: pd.DataFrame, title: str = "", color: str | None = None):
    """Loss, gradient norm and loss scale (where not 1 throughout) against the step, a panel
    each, log y for the last two."""
    import altair as alt
    panels = []
    for metric, label in CURVES.items():
        d = frame[frame["metric"] == metric]
        if d.empty or (metric == "loss_scale" and (d["value"] == 1.0).all()):  # no loss scaling: nothing to show
            continue
        log = metric != "loss" and (d["value"] > 0).all()
        enc = dict(x=alt.X("step:Q", title="optimizer step"),
                   y=alt.Y("value:Q", title=label, scale=alt.Scale(type="log" if log else "linear", zero=False)),
                   tooltip=["step:Q", "value:Q"] + ([f"{color}:N"] if color else []))
        if color:  # dashes too: where two runs' curves coincide, the lower shows through the gaps
            enc["color"] = alt.Color(f"{color}:N", title=color)
            enc["strokeDash"] = alt.StrokeDash(f"{color}:N", title=color)
        mark = alt.Chart(d).mark_line(point=metric == "loss_scale" and len(d) <= 60)  # a few changes: each one marked
        panels.append(mark.encode(**enc).properties(width=520, height=140))
    return alt.vconcat(*panels, title=title)


def show_chart(chart, interactive: bool = True) -> None:
    """Display an Altair chart as every notebook does (``analysis.charts.show``): the spec plus a
    PNG; ``interactive=False``: an SVG alone (a run's curves: the spec would copy its step log)."""
    from IPython.display import display

    from benchlib.analysis.charts import show
    display(show(chart, static="png" if interactive else "svg", interactive=interactive))


def plot_curves(result: TrainResult) -> None:
    rec = result.record
    title = f"{rec['run_id']} ({rec['status']})"
    if not result.steps.empty:
        show_chart(curves_chart(curves_frame(result.steps), title=title),
                   interactive=os.environ.get(STATIC_CHARTS_ENV) != "1")
    else:
        print(f"{title}: no steps were logged")


def plot_compare(results: list[TrainResult]) -> None:
    frame = pd.concat([curves_frame(r.steps, r.record["config"]) for r in results], ignore_index=True)
    show_chart(curves_chart(frame, title=f"scenario {results[0].record['scenario']}", color="run"))


# ---- results -------------------------------------------------------------------------
RESULT_KEYS = ["quality", "quality/beats_baseline", "throughput", "memory", "step_ms",
            "mfu_pct", "stability/diverged_step", "stability/degraded_step", "stability/stalled_step",
            "stability/nonfinite_steps", "stability/skipped_steps", "stability/final_loss_scale",
            "stability/max_grad_norm", "time/first_step_s", "time/train_s"]
METRIC_LABEL = {"val_loss": "val loss", "perplexity": "perplexity", "micro_f1": "micro-F1", "macro_f1": "macro-F1",
                "p_at_1": "P@1", "p_at_3": "P@3", "p_at_5": "P@5", "accuracy": "accuracy"}
FORENSIC_LABEL = {"grad_zero_frac": "grads exactly 0", "grad_fp16_subnormal_frac": "grads fp16-subnormal",
                  "grad_fp16_flush_frac": "grads below fp16", "grad_nonfinite_frac": "grads inf/nan",
                  "update_unchanged_frac": "weights an update left unchanged"}


def _versus(m: dict, name: str) -> str | None:
    """'P@1 0.84 ± 0.01 vs label-frequency 0.12', or None when the record lacks either side."""
    v, b = m.get(f"quality/{name}"), m.get(f"baseline/{name}")
    if v is None or b is None:
        return None
    se = m.get(f"quality/{name}_se")
    base = str(m.get("baseline/name") or "trivial baseline").replace("_", "-")
    return f"{METRIC_LABEL.get(name, name)} {fmt(v)}{f' ± {se:.2g}' if isinstance(se, float) else ''} vs {base} {fmt(b)}"


def data_line(rec: dict, evaluated: bool = True) -> str:
    """Real data's source, validation split rule and (``evaluated``) evaluated share; '' for synthetic."""
    d = rec.get("data") or {}
    if d.get("source") in (None, "synthetic"):
        return ""
    n = (rec.get("metrics") or {}).get("quality/n_eval") if evaluated else None
    rule = d.get("split_rule") or d.get("val_rule") or "not recorded"
    return (f"data: {d['source']}; validation: {rule}"
            + (f"; evaluated on {n} of {d.get('n_val', d.get('n_val_sequences', '?'))}" if n else ""))


def result_summary(result: TrainResult | dict) -> str:
    """A few lines on the run: status and reason, data, quality against the trivial baseline,
    forensic means, served precisions."""
    rec = result.record if isinstance(result, TrainResult) else result
    m = rec.get("metrics") or {}
    reason = (rec.get("reason") or "").strip()
    lines = [f"status: {rec['status']}" + (f" ({reason.splitlines()[-1]})" if reason else "")]
    if data_line(rec):
        lines.append(data_line(rec))
    learned, headline = m.get("quality/learned_metric"), m.get("quality_name")
    shown = [n for n in dict.fromkeys([learned, headline]) if n and _versus(m, n)]
    if shown:
        beats = m.get("quality/beats_baseline")
        verdict = {True: "beat it", False: "did not clearly beat it"}.get(beats, "not decided")
        if beats is not None and m.get("quality/baseline_gain") is not None:
            verdict += (f" (gain {fmt(m['quality/baseline_gain'])} on {METRIC_LABEL.get(learned, learned)}, "
                        f"needed > {fmt(m.get('quality/baseline_gain_needed'))}")
            verdict += f", {m['quality/n_eval']} examples)" if m.get("quality/n_eval") else ")"
        lines.append("quality: " + "; ".join(_versus(m, n) for n in shown) + f": {verdict}")
    elif m.get("quality") is not None:
        lines.append(f"quality: {METRIC_LABEL.get(headline, headline)} {fmt(m['quality'])} (no trivial baseline recorded)")
    forensic = [f"{label} {100 * m[f'forensics/{k}_mean']:.3g}%" for k, label in FORENSIC_LABEL.items()
                if m.get(f"forensics/{k}_mean") is not None]
    if forensic:
        lines.append("forensics (mean over logged steps): " + ", ".join(forensic))
    served = [f"{mode} " + (f"{fmt(s['metrics'].get(headline))} ({s['minus_trained'].get(headline, 0):+.3g})"
                            if s.get("status") == "ok" else s.get("status", "?"))
              for mode, s in (rec.get("serve") or {}).items()]
    if served:
        lines.append(f"served in (serve_modes; {METRIC_LABEL.get(headline, headline)}, change vs trained): "
                     + ", ".join(served))
    return "\n".join(lines)


def show_result(result: TrainResult) -> pd.DataFrame:
    """Print ``result_summary``, and return ``result_table`` for the notebook to display."""
    print(result_summary(result))
    return result_table(result)


def result_table(result: TrainResult) -> pd.DataFrame:
    """The record's headline metrics, quality metrics (with baseline and standard error where
    recorded) and forensic means, each with its meaning."""
    from benchlib.core.records import METRICS
    rec, m = result.record, result.record["metrics"]
    rows = [("status", rec["status"], None, None, (rec["reason"] or "").strip())]
    quality = sorted(k for k in m if k.startswith("quality/") and not k.endswith("_se")
                     and not k.startswith("quality/baseline_") and k not in RESULT_KEYS)
    evidence = sorted(k for k in m if k.startswith("quality/baseline_") and not k.endswith("_se"))
    forensic = sorted(k for k in m if k.startswith("forensics/") and k.endswith("_mean"))
    for k in dict.fromkeys(RESULT_KEYS + quality + evidence + forensic):
        if k not in m:
            continue
        meaning = METRICS.get(k, "")
        if k == "quality":
            meaning = (f"{m.get('quality_name')} ({'higher' if m.get('quality_higher_is_better') else 'lower'} "
                       "is better)")
        if k == "throughput":
            meaning = m.get("throughput_unit", meaning)
        name = k.removeprefix("quality/")
        se = m.get("quality_se") if k == "quality" else m.get(f"quality/{name}_se") if k.startswith("quality/") else None
        base = m.get("baseline/quality") if k == "quality" else m.get(f"baseline/{name}") if k.startswith("quality/") else None
        rows.append((k, m[k], se, base, meaning))
    df = pd.DataFrame(rows, columns=["metric", "value", "se", "baseline", "meaning"]).set_index("metric")
    return df.drop(columns=[c for c in ("se", "baseline") if df[c].isna().all()])


def compare_table(results: list[TrainResult]) -> pd.DataFrame:
    from benchlib.core.records import records_frame
    cols = ["config", "status", "quality", "baseline/quality", "quality/beats_baseline", "throughput", "memory",
            "step_ms", "stability/diverged_step"]
    df = records_frame([r.record for r in results])
    return df[[c for c in cols if c in df]].set_index("config")
