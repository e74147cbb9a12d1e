"""Does a config's gap to the reference grow with training? (issue 54's horizon arm)

A run evaluates every ``eval_every`` steps: its validation loss (LM), its micro-F1 or accuracy too
(classification; ``within_line`` reads the metric each scenario is judged by). At each evaluation step, each
config's per-seed values are compared with the scenario's reference at the same step and seed
(``contrasts.contrast``: paired t-interval, the verdicts' rule), so the gap can be read against the
step: ``gaps``. ``trend`` asks whether the gap at the last evaluation is worse than at the first,
paired by seed (one-sided t-test). Steps past one pass over the corpus (``one_pass_step``) are
marked: there the loss partly measures memorisation. ``change_pct`` < 0 = worse, as in the answer.
"""
from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import scipy.stats as sps

from benchlib.analysis import charts
from benchlib.analysis.contrasts import contrast
from benchlib.analysis.gates import MEASURED, val_history
from benchlib.analysis.stats import Rules, adjust
from benchlib.analysis.tables import config_order, load_study
from benchlib.core.records import read_steps, steps_file

GAP_COLUMNS = ["scenario", "config", "reference", "step", "n_paired", "change_pct", "ci_low", "ci_high",
               "past_one_pass"]
ZOOM_EFFECTS = 5  # a second panel keeps the configs within this many minimum effects of the reference
BETA2_COLUMNS = ["scenario", "config", "step", "beta2_from", "beta2_to", "n_paired", "loss_from", "loss_to", "change_pct",
                 "ci_low", "ci_high"]
TREND_COLUMNS = ["scenario", "config", "reference", "first_step", "last_step", "n_paired", "change_first_pct",
                 "change_last_pct", "growth_pct", "p_grows_worse", "grows_worse", "slope_pct_per_kstep", "p_slope_falls"]


def evaluations(df: pd.DataFrame, metric: str = "val_loss", scenarios=None) -> pd.DataFrame:
    """(scenario, config, seed, step, ``metric``, one_pass_step) of every evaluation during training
    of the measured runs in a study frame (``tables.load_study``); ``metric`` the val loss, or a
    classification study's judged metric where it evaluates during training (``eval_every``);
    ``scenarios``: those alone (default: all)."""
    rows = []
    keep = df["status"].isin(MEASURED) & (df["scenario"].isin(scenarios) if scenarios is not None else True)
    for _, r in df[keep].iterrows():
        one_pass = r.get("one_pass_step", math.nan)
        rows += [(r["scenario"], r["config"], int(r["seed"]), step, v, one_pass)
                 for step, v in val_history(r["path"], metric)]
    return pd.DataFrame(rows, columns=["scenario", "config", "seed", "step", metric, "one_pass_step"])


def _reference(ev: pd.DataFrame, rules: Rules) -> str | None:
    """The first of ``rules.reference_configs`` with an evaluation: a study short of seeds still
    draws its point gaps (no interval below ``rules.min_seeds`` paired seeds, no trend verdict)."""
    present = set(ev["config"])
    return next((c for c in rules.reference_configs if c in present), None)


def gaps(ev: pd.DataFrame, rules: Rules = Rules(), metric: str = "val_loss", higher_is_better: bool = False) -> pd.DataFrame:
    """Each config's change of validation loss (or ``metric``) against the reference at each evaluation
    step, in % of the reference's (< 0 worse), with the 90% t-interval over the seeds both have at that step
    (NaN below ``rules.min_seeds`` paired seeds: the point gap alone, its seed noise unmeasured)."""
    out = []
    for scn, e in ev.groupby("scenario"):
        ref = _reference(e, rules)
        if ref is None:
            continue
        one_pass = pd.to_numeric(e["one_pass_step"], errors="coerce").min()
        at = e.pivot_table(index=["config", "step"], columns="seed", values=metric, aggfunc="first")
        for (cfg, step), x in at.iterrows():
            if cfg == ref or (ref, step) not in at.index:
                continue
            c = contrast(x, at.loc[(ref, step)], 1 if higher_is_better else -1, rules, exact=False)
            out.append({"scenario": scn, "config": cfg, "reference": ref, "step": int(step),
                        "n_paired": c["n_paired"], "change_pct": -c["gap_pct"], "ci_low": -c["ci_high"],
                        "ci_high": -c["ci_low"], "past_one_pass": bool(np.isfinite(one_pass) and step >= one_pass)})
    return pd.DataFrame(out, columns=GAP_COLUMNS)


def trend(ev: pd.DataFrame, rules: Rules = Rules(), metric: str = "val_loss", higher_is_better: bool = False) -> pd.DataFrame:
    """Per (scenario, config): the change at the first and the last evaluation both it and the
    reference made, ``growth_pct`` (last - first, < 0: the gap grew worse), and the one-sided paired
    t-test that it grew worse over the seeds (``grows_worse`` at ``rules.alpha``; p NaN and
    ``grows_worse`` None below ``rules.min_seeds`` paired seeds, the verdicts' rule). A second
    reading of "grows", from every evaluation rather than two: ``slope_pct_per_kstep``, the mean
    over seeds of each seed's least-squares slope of the change against the step (% per 1,000
    steps), and ``p_slope_falls``, the one-sided t-test over the seeds that it is negative (NaN
    below ``rules.min_seeds``). The two can disagree: a gap that bumps up midway and ends lower
    shows in the first, a small steady drift in the second."""
    out = []
    for scn, e in ev.groupby("scenario"):
        ref = _reference(e, rules)
        if ref is None:
            continue
        at = e.pivot_table(index=["config", "seed"], columns="step", values=metric, aggfunc="first")
        sign = 1 if higher_is_better else -1  # change > 0: better than the reference
        for cfg in sorted(set(e["config"]) - {ref}):
            if cfg not in at.index.get_level_values(0):
                continue
            x, r = at.loc[cfg], at.loc[ref]
            seeds = x.index.intersection(r.index)
            steps = [s for s in at.columns if x.loc[seeds, s].notna().all() and r.loc[seeds, s].notna().all()]
            if len(seeds) == 0 or len(steps) < 2:
                continue
            first, last = steps[0], steps[-1]
            change = {s: 100 * sign * (x.loc[seeds, s] - r.loc[seeds, s]) / r.loc[seeds, s].mean() for s in (first, last)}
            growth = (change[last] - change[first]).to_numpy(float)
            enough = len(growth) >= max(rules.min_seeds, 2)
            p = float(sps.ttest_1samp(growth, 0.0, alternative="less").pvalue) if enough else math.nan
            every = 100 * sign * (x.loc[seeds, steps] - r.loc[seeds, steps]) / r.loc[seeds, steps].mean()
            slopes = np.array([sps.linregress(np.asarray(steps, float), every.loc[sd].to_numpy(float)).slope * 1000
                               for sd in seeds])
            p_slope = float(sps.ttest_1samp(slopes, 0.0, alternative="less").pvalue) if enough else math.nan
            out.append({"scenario": scn, "config": cfg, "reference": ref, "first_step": int(first),
                        "last_step": int(last), "n_paired": len(seeds),
                        "change_first_pct": float(change[first].mean()), "change_last_pct": float(change[last].mean()),
                        "growth_pct": float(growth.mean()), "p_grows_worse": p,
                        "grows_worse": None if math.isnan(p) else bool(p < rules.alpha),
                        "slope_pct_per_kstep": float(slopes.mean()), "p_slope_falls": p_slope})
    return pd.DataFrame(out, columns=TREND_COLUMNS)


def chart(g: pd.DataFrame, ev: pd.DataFrame, rules: Rules = Rules(), source: str = "") -> alt.Chart:
    """The gap against the step, one line per config with its interval as a band, one panel per
    scenario; beside it, where some config strays past ``ZOOM_EFFECTS`` minimum effects and others
    do not, the latter alone on their own scale; dashed: minus the minimum effect (below it a verdict
    cannot be "safe"); grey rule: one pass over the corpus, past which the loss partly measures memorisation.
    ``source``: last subtitle lines (one a line break) naming the runs (device, versions, commits) and the command."""
    title = "Does the gap to the reference grow with training?"
    if g.empty:
        return charts.no_data_chart("no config and reference with evaluations at the same steps", title)
    colour = charts._color(g["config"].unique())
    colour.legend = alt.Legend(title="config", columns=1, symbolOpacity=1, labelLimit=260)  # the lines' colour
    passes = ev.groupby("scenario")["one_pass_step"].min()
    last = g.groupby("scenario")["step"].max()
    beyond = {scn: p for scn, p in passes.items() if pd.notna(p) and p > last.get(scn, math.inf)}
    zoom = ZOOM_EFFECTS * rules.min_effect_loss_pct
    rows = []
    for scn, part in g.groupby("scenario"):
        near = part.groupby("config")["change_pct"].transform(lambda c: c.abs().max() <= zoom)
        panels = [(f"{scn}: val loss vs reference (%, < 0 worse)", part)]
        if not near.all() and near.any():  # a broken config would flatten the candidates' lines
            panels.append((f"{scn}: configs within +-{zoom:g}% (zoom)", part[near]))
        rule = None if scn in beyond else passes.get(scn)  # past the last evaluation it would only widen the axis
        rows.append(alt.hconcat(*[_panel(d, label, colour, rule, rules) for label, d in panels]))
    ref = ", ".join(sorted(g["reference"].unique()))
    n = sorted(g["n_paired"].unique())
    seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
    band = (f"band: {1 - 2 * rules.alpha:.0%} t-interval" if n[-1] >= rules.min_seeds
            else f"no band: under {rules.min_seeds} seeds the seed noise is not measured")
    one_pass = "; ".join(f"{scn}: one pass over the corpus at step {p:,.0f}, past the last evaluation"
                         for scn, p in sorted(beyond.items())) or "grey: one pass over the corpus"
    return alt.vconcat(*rows).properties(title=charts.chart_title(
        title, [f"{seeds} seed(s) paired against {ref}; {band}",
                f"dashed: -{rules.min_effect_loss_pct}% (the minimum effect); {one_pass}"]
        + _source_lines(source), offset=12))


def _panel(part: pd.DataFrame, label: str, colour, one_pass: float | None, rules: Rules) -> alt.LayerChart:
    d = part.assign(band_lo=part["ci_low"].fillna(part["change_pct"]), band_hi=part["ci_high"].fillna(part["change_pct"]))
    base = alt.Chart(d).encode(x=alt.X("step:Q", title="training step"))
    band = base.mark_area(opacity=0.15).encode(y=alt.Y("band_lo:Q", title=label), y2="band_hi:Q", color=colour)
    line = base.mark_line(point=True).encode(
        y="change_pct:Q", color=colour,
        tooltip=["config", "step", alt.Tooltip("change_pct:Q", format="+.2f"), alt.Tooltip("ci_low:Q", format="+.2f"),
                 alt.Tooltip("ci_high:Q", format="+.2f"), "n_paired", "past_one_pass"])
    minimum = alt.Chart(pd.DataFrame({"y": [-rules.min_effect_loss_pct]})).mark_rule(strokeDash=[4, 3]).encode(y="y:Q")
    layers = [band, line, minimum]
    if one_pass is not None and pd.notna(one_pass):
        layers.append(alt.Chart(pd.DataFrame({"x": [one_pass]})).mark_rule(color="grey").encode(x="x:Q"))
    return alt.layer(*layers).properties(width=charts.WIDTH, height=260)


def _source_lines(source: str, width: int = 120) -> list[str]:
    """``source`` as subtitle lines: one a line break, each wrapped at ``width`` characters (a long list of
    commits would run past the chart)."""
    return [part for line in source.split("\n") for part in textwrap.wrap(line, width, break_on_hyphens=False)]


FORENSICS = {"update_lost_frac": "update lost to rounding",
             "exp_avg_sq_stuck_frac": "second moment that cannot decay"}
"""The step-log counters (``training.forensics``) drawn beside the gap: of each update the optimizer
computed, the share the stored weights did not receive; of the Adam second-moment entries a step should
shrink, the share left bit-identical. Both are 0 where the stored numbers take everything the step computes."""
FORENSIC_COLUMNS = ["scenario", "config", "counter", "step", "value", "n_seeds"]


def forensics(df: pd.DataFrame, ev: pd.DataFrame) -> pd.DataFrame:
    """Each ``FORENSICS`` counter of a study frame's measured runs (``tables.load_study``) against the
    step, on the evaluation steps of ``ev`` (``evaluations``): per run the mean over its logged steps
    since the previous evaluation, then the mean over seeds (``n_seeds``), in % (``value``). Runs or
    counters their step logs do not carry (8-bit states, older logs) are left out."""
    rows = []
    for _, r in df[df["status"].isin(MEASURED)].iterrows():
        evals = sorted(ev.loc[(ev["scenario"] == r["scenario"]) & (ev["config"] == r["config"]), "step"].unique())
        log = steps_file(Path(r["path"]).parent) if isinstance(r.get("path"), str) and r["path"] else None
        if not evals or log is None:
            continue
        steps = pd.DataFrame([x for x in read_steps(log) if "eval" not in x])
        for counter in FORENSICS:
            if counter not in steps:
                continue
            part = steps[["step", counter]].dropna()
            part = part.assign(at=np.searchsorted(evals, part["step"].to_numpy()))
            part = part[part["at"] < len(evals)]  # after the last evaluation: no gap to set it beside
            for at, g in part.groupby("at"):
                rows.append((r["scenario"], r["config"], counter, int(evals[at]), int(r["seed"]), 100 * g[counter].mean()))
    runs = pd.DataFrame(rows, columns=["scenario", "config", "counter", "step", "seed", "value"])
    if runs.empty:
        return pd.DataFrame(columns=FORENSIC_COLUMNS)
    out = runs.groupby(["scenario", "config", "counter", "step"], as_index=False).agg(
        value=("value", "mean"), n_seeds=("seed", "nunique"))
    return out[FORENSIC_COLUMNS]


def forensics_chart(f: pd.DataFrame, floor_pct: float = 0.1, source: str = "", configs=None,
                    rules: Rules = Rules()) -> alt.Chart:
    """Each counter of ``forensics`` against the step, one line per config, a panel per scenario and
    counter; a counter no config lifts above ``floor_pct`` % is left out (it explains no gap). ``source``:
    last subtitle lines naming the runs and the command, as ``chart``'s. ``configs``: the gap chart's,
    so that a config keeps its colour in both (the reference's comes after them)."""
    title = "Where the update went: what the stored numbers could not take"
    shown = f[f.groupby(["scenario", "counter"])["value"].transform("max") > floor_pct] if not f.empty else f
    if shown.empty:
        return charts.no_data_chart(f"no config lost more than {floor_pct:g}% of its update or second-moment decay "
                                    "at any logged step (or the step logs carry no such counter)", title)
    ref = _reference(shown, rules)
    order = config_order([c for c in (configs if configs is not None else shown["config"].unique()) if c != ref])
    order += [ref] if ref else []
    order += config_order([c for c in shown["config"].unique() if c not in order])
    colour = charts._color(order, keep_order=True)
    colour.legend = alt.Legend(title="config", columns=1, symbolOpacity=1, labelLimit=260)
    rows = []
    for scn, part in shown.groupby("scenario"):
        panels = []
        for counter, d in part.groupby("counter"):
            base = alt.Chart(d).encode(x=alt.X("step:Q", title="training step"))
            line = base.mark_line(point=True).encode(
                y=alt.Y("value:Q", title=f"{scn}: {FORENSICS[counter]} (%)"), color=colour,
                tooltip=["config", "step", alt.Tooltip("value:Q", format=".2f"), "n_seeds"])
            panels.append(line.properties(width=charts.WIDTH, height=220))
        rows.append(alt.hconcat(*panels))
    n = sorted(shown["n_seeds"].unique())
    seeds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
    return alt.vconcat(*rows).properties(title=charts.chart_title(title, [
        "update lost to rounding: of each update the optimizer computed, the share the stored weights did not receive",
        "second moment that cannot decay: of the Adam v entries a step should shrink, the share left bit-identical",
        f"mean over the logged steps since the previous evaluation, then over {seeds} seed(s)",
        f"counters no config lifts above {floor_pct:g}% left out; a config without a line logs no such counter "
        "(8-bit optimizer states)"] + _source_lines(source), offset=12))


def findings_line(study_dir, provenance: str) -> list[str]:
    """One supporting line of the README's Findings (``dtype-bench findings --horizon STUDY``): the
    study's recipe, each config's change against the reference at the first and the last evaluation,
    worst last first, and the trend verdict, or why there is none (fewer paired seeds than the rules ask);
    ``provenance``: the records' device, versions and commit in words (``findings.provenance``)."""
    study_dir = Path(study_dir)
    ev, t, recs = _read(study_dir)
    rules = Rules()

    def one(col: str) -> str:
        vals = sorted({str(v) for v in recs.get(col, pd.Series(dtype=object)).dropna()})
        return "/".join(vals) or "?"
    passes = math.nan
    if {"run.steps", "one_pass_step"} <= set(recs.columns):
        passes = (pd.to_numeric(recs["run.steps"], errors="coerce") / pd.to_numeric(recs["one_pass_step"], errors="coerce")).max()
    read = f" read {passes:.2f} times" if np.isfinite(passes) else ""
    n = sorted(t["n_paired"].unique())
    first, last = int(t["first_step"].min()), int(t["last_step"].max())
    t = t.sort_values("change_last_pct")
    g = gaps(ev, rules)
    at_last = g[g["step"] == last].set_index("config")
    gaps_text = "; ".join(f"{r.config} {r.change_first_pct:+.2f} -> {r.change_last_pct:+.2f}%{_interval(at_last, r.config)}"
                          + (f" ({r.n_paired} seed{'s' * (r.n_paired > 1)})" if len(n) > 1 else "")
                          for r in t.itertuples())
    verdict = _trend_verdict(t, rules, first, last)
    ref = ", ".join(sorted(t["reference"].unique()))
    return [f"Horizon, `{study_dir.name}` ({', '.join(sorted(ev['scenario'].unique()))} at `{one('run.size')}` on "
            f"{one('run.data')}{read}, {one('run.steps')} steps, beta2 {one('run.beta2')}, {'-'.join(map(str, sorted({n[0], n[-1]})))} "
            f"seed(s); {provenance}): val loss change vs {ref} at step {first} -> {last} (< 0 worse; "
            f"[{1 - 2 * rules.alpha:.0%} t-interval] at {rules.min_seeds}+ seeds): "
            f"{gaps_text}. {verdict} (`{study_dir}/horizon/`)."]


def _read(study_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(evaluations, trend, measured records) of a horizon study; ValueError where no config has
    evaluations at two steps beside its reference's."""
    df = load_study(study_dir)
    ev = evaluations(df)
    t = trend(ev)
    if t.empty:
        raise ValueError("no config with evaluations at two steps beside its reference's: nothing to say of the horizon")
    return ev, t, df[df["status"].isin(MEASURED)]


def answer_line(study_dirs) -> str:
    """The answer's note on what lies past its steps (``findings --answer`` with ``--horizon``): for
    each horizon study, by beta2, each candidate's change against the reference at the last
    evaluation (its interval at ``rules.min_seeds`` paired seeds, else a point with its seed count)
    and whether the gap grew worse since the first evaluation; controls are left to the study."""
    rules, parts, scope = Rules(), [], set()
    for d in map(Path, study_dirs):
        ev, t, recs = _read(d)
        roles = recs.groupby("config")["role"].first().to_dict() if "role" in recs else {}
        controls = t[[roles.get(c) == "control" for c in t["config"]]]
        t = t[[roles.get(c, "candidate") == "candidate" for c in t["config"]]].sort_values("change_last_pct")
        last = int(t["last_step"].max())
        at_last = gaps(ev, rules).query("step == @last").set_index("config")
        beta2 = "/".join(sorted({f"{float(v):g}" for v in recs.get("run.beta2", pd.Series(dtype=float)).dropna()}))
        scope.add((", ".join(sorted(ev["scenario"].unique())), "/".join(sorted({str(v) for v in recs["run.data"]})),
                   "/".join(sorted({str(v) for v in recs["run.steps"]})), last, ", ".join(sorted(t["reference"].unique()))))
        verdicts, none_why = _verdicts(d)
        if none_why:  # every candidate untestable: one reason for the study, not a bold word per config
            verdicts = {}
            none_why = _no_verdict(none_why, controls, rules)
        cells = []
        for r in t.itertuples():
            interval = _interval(at_last, r.config)
            grew = ("" if r.grows_worse is None or pd.isna(r.grows_worse) else
                    f", grows worse (p {r.p_grows_worse:.3f})" if r.grows_worse else ", not shown to grow")
            said = f", **{verdicts[r.config]}**" if verdicts.get(r.config) not in (None, "not tested") else ""
            cells.append(f"{r.config} {r.change_last_pct:+.2f}%" + (interval or f" ({r.n_paired} seed{'s' * (r.n_paired > 1)})")
                         + said + grew)
        parts.append(f"at beta2 {beta2} (`{d.name}`): " + "; ".join(cells) + (f" (no verdict: {none_why})" if none_why else ""))
    (scn, data, steps, last, ref), *other = sorted(scope)
    where = (f"{scn} alone, on {data}, {steps} steps" if not other else "the studies' own recipes")
    return (f"**Past the answer's steps** ({where}; val loss against {ref} at step {last}, < 0 worse, "
            f"[{1 - 2 * rules.alpha:.0%} t-interval] at {rules.min_seeds}+ paired seeds, a point below; growth: "
            f"one-sided paired t of the gap at the last evaluation against the first): " + "; ".join(parts)
            + ". A verdict in bold is the study's own, by the table's rule at that horizon (Holm over its configs); "
            "the growth test is not corrected over configs.")


def within_line(arms, rules: Rules = Rules()) -> str:
    """The answer's note on whether its own verdicts sit on a gap still moving: for each arm
    (``(label, study folders, comparison)``), each scenario whose judged metric its runs evaluated
    during training (the LM scenarios' val loss; a classification study's micro-F1 or accuracy where
    it sets ``eval_every``), each candidate's ``trend`` of that metric from the first to the last
    evaluation; Holm per scenario over its candidates (the table's verdicts are corrected per
    scenario too). Names the configs whose gap grew worse (after Holm, or uncorrected only) and
    counts the rest; the scenarios judged at their end only are named as out of it. '' where no
    arm has a scenario with two evaluations at ``rules.min_seeds`` paired seeds."""
    parts, n_tests, out = [], 0, set()
    for label, folders, comparison in arms:
        judged = {s: q for s, q in (comparison.get("quality_metric") or {}).items() if (q or {}).get("name")}
        role = {(e["scenario"], e["config"]): e.get("role", "candidate")
                for e in comparison.get("recommendation_evidence", [])}
        trends = {}
        for d in map(Path, folders):
            try:
                df = load_study(d)
            except FileNotFoundError:  # no records there (a comparison made from a frame): nothing evaluated
                continue
            for metric in sorted({q["name"] for q in judged.values()}):
                scns = {s for s, q in judged.items() if q["name"] == metric} - set(trends)
                ev = evaluations(df, metric, scns)
                for scn, e in ev.groupby("scenario"):
                    t = trend(e, rules, metric, bool(judged[scn].get("higher_is_better")))
                    t = t[t["config"].map(lambda c: role.get((scn, c)) == "candidate") & t["p_grows_worse"].notna()]
                    if len(t):
                        trends[scn] = t.assign(metric=metric)
        out |= set(judged) - set(trends)
        if not trends:
            continue
        p = {}  # Holm over each scenario's candidates, the family of the table's verdicts
        for t in trends.values():
            p.update(adjust({(r.scenario, r.config): r.p_grows_worse for r in t.itertuples()}, rules))
        n_tests += len(p)
        cells = []
        for scn, t in sorted(trends.items()):
            t = t.assign(p_adj=[p[(scn, c)] for c in t["config"]]).sort_values("p_grows_worse")
            def named(rows):
                return ", ".join(f"{r.config} {r.change_first_pct:+.2f} -> {r.change_last_pct:+.2f}% (p {r.p_grows_worse:.3f}, "
                                 f"Holm {r.p_adj:.2f})" for r in rows.itertuples())
            sure, raw = t[t["p_adj"] < rules.alpha], t[(t["p_grows_worse"] < rules.alpha) & (t["p_adj"] >= rules.alpha)]
            rest = len(t) - len(sure) - len(raw)
            said = ([f"grows worse {named(sure)}"] if len(sure) else []) + (
                [f"uncorrected only {named(raw)}"] if len(raw) else [])
            cells.append(f"{scn} ({t['metric'].iloc[0]}, step {int(t['first_step'].min()):,} -> {int(t['last_step'].max()):,}, "
                         f"{'-'.join(map(str, sorted({int(t['n_paired'].min()), int(t['n_paired'].max())})))} seeds): "
                         + "; ".join(said + [f"{'the other ' if said else ''}{rest} not shown to grow"] if rest else said))
        parts.append(f"at {label}: " + "; ".join(cells))
    if not parts:
        return ""
    out_words = (f"; {', '.join(sorted(out))} evaluated at their end only, so out of it" if out else "")
    return ("**Does the gap move within the answer's steps?** (the scenarios whose judged metric was evaluated during "
            f"training{out_words}. Per candidate, the one-sided paired t that its "
            "gap to the reference is worse at the last evaluation than at the first, in % of the reference's metric, "
            "< 0 worse; Holm per scenario over its candidates (the table's verdicts are corrected per scenario too), "
            f"{n_tests} tests in all; a test of few seeds finds only large trends, "
            "so \"not shown\" is not \"flat\"): " + "; ".join(parts) + ". A verdict whose gap still grows at its last "
            "step holds at that step count, not beyond it.")


def _verdicts(study_dir: Path) -> tuple[dict, dict | None]:
    """(config -> the verdict its study's comparison gives it at the study's one scenario, where the
    study was compared (``comparison/comparison.json``), else {}; the scenario's ``reliability``
    entry where the study judges none of its candidates (every one untestable), else None)."""
    path = study_dir / "comparison" / "comparison.json"
    if not path.is_file():
        return {}, None
    comparison = json.loads(path.read_text())
    evidence = [e for e in comparison.get("recommendation_evidence", []) if e.get("verdict") != "reference"]
    judged = [e for e in evidence if e.get("role", "candidate") == "candidate"]
    untestable = bool(judged) and all(e.get("verdict") == "untestable" for e in judged)
    reliability = next(iter(comparison.get("reliability", {}).values()), {})
    return {e["config"]: e.get("verdict") for e in evidence}, (reliability if untestable else None)


def _no_verdict(reliability: dict, controls: pd.DataFrame, rules: Rules) -> str:
    """Why a study judges none of its candidates, in a clause: its candidates not told apart and no
    control shown degraded (``gates.reliability``), each control short of ``rules.min_seeds`` paired
    seeds named with its count; otherwise its quality not established."""
    if reliability.get("told_apart") is not False or reliability.get("detects"):
        return "its quality is not established (the study's comparison says why)"
    short = [f"{r.config} has {r.n_paired} of the {rules.min_seeds} paired seeds the rules ask" for r in
             controls.itertuples() if r.n_paired < rules.min_seeds]
    return (f"its candidates are not told apart (rank reliability {reliability.get('reliability', math.nan):.2f}) and "
            f"no control is shown degraded, so it has not shown it detects a defect"
            + (f": control {'; '.join(short)}" if short else ""))


def _interval(at_last: pd.DataFrame, config: str) -> str:
    """`` [lo, hi]``: the config's t-interval at the last evaluation, where its seeds measure one."""
    if config not in at_last.index or pd.isna(at_last.loc[config, "ci_low"]):
        return ""
    return f" [{at_last.loc[config, 'ci_low']:+.2f}, {at_last.loc[config, 'ci_high']:+.2f}]"


def _trend_verdict(t: pd.DataFrame, rules: Rules, first: int, last: int) -> str:
    """Which configs' gaps grew worse from ``first`` to ``last`` (one-sided paired t), which were
    tested and not shown to, and which have too few paired seeds for the test, each with its count."""
    n_max = int(t["n_paired"].max())
    if n_max < rules.min_seeds:
        return (f"No verdict on growth: {n_max} paired seed(s), the rules ask {rules.min_seeds}, "
                "so neither the gaps' seed noise nor their growth is measured")
    tested = t[t["grows_worse"].notna()]
    worse = tested[tested["grows_worse"].astype(bool)]
    flat = tested[~tested["grows_worse"].astype(bool)]
    few = t[t["grows_worse"].isna()]
    parts = [f"Grows worse from step {first} to {last} (one-sided paired t, alpha {rules.alpha:g}): "
             + (", ".join(f"{r.config} (p {r.p_grows_worse:.3f}, {r.n_paired} seeds)" for r in worse.itertuples())
                or "none")]
    if len(flat):
        parts.append("not shown to grow (a test of this many seeds finds only large trends): "
                     + ", ".join(f"{r.config} (p {r.p_grows_worse:.2f}, {r.n_paired} seeds)" for r in flat.itertuples()))
    falls = tested["p_slope_falls"] < rules.alpha
    parts.append("a second reading, the per-seed least-squares slope over every evaluation (one-sided t): falls for "
                 + (", ".join(f"{r.config} ({r.slope_pct_per_kstep:+.2f}% per 1,000 steps, p {r.p_slope_falls:.3f})"
                              for r in tested[falls].itertuples()) or "none")
                 + ("" if falls.all() else ", not shown for "
                    + ", ".join(f"{r.config} (p {r.p_slope_falls:.2f})" for r in tested[~falls].itertuples())))
    if len(few):
        parts.append(f"no verdict under {rules.min_seeds} paired seeds: "
                     + ", ".join(f"{r.config} ({r.n_paired})" for r in few.itertuples()))
    return "; ".join(parts)


def across_beta2(arms: dict[float, pd.DataFrame], rules: Rules = Rules()) -> pd.DataFrame:
    """Two horizon arms that differ only in AdamW's beta2 (``arms``: beta2 -> ``evaluations``): for
    each (scenario, config) both ran, its validation loss at the last step both evaluated, the arm of
    the larger beta2 against the smaller one, paired by seed (``contrast``: % of the smaller beta2's
    loss, < 0 worse at the larger beta2; the 90% t-interval at ``rules.min_seeds`` shared seeds, the
    point change alone below). ``loss_from`` / ``loss_to``: the means over the seeds compared. This
    reads the recipe itself: a config's gap to fp32 within one arm says nothing of whether the arm's
    beta2 trains better."""
    if len(arms) != 2:
        raise ValueError(f"across beta2 needs two arms of different beta2, got {len(arms)}")
    lo, hi = sorted(arms)
    out = []
    a, b = (arms[k].pivot_table(index=["scenario", "config", "step"], columns="seed", values="val_loss", aggfunc="first")
            for k in (lo, hi))
    for scn, cfg in sorted({i[:2] for i in a.index} & {i[:2] for i in b.index}):
        steps = sorted(set(a.loc[(scn, cfg)].index) & set(b.loc[(scn, cfg)].index))
        if not steps:
            continue
        x, ref = b.loc[(scn, cfg, steps[-1])].dropna(), a.loc[(scn, cfg, steps[-1])].dropna()
        shared = sorted(set(x.index) & set(ref.index))
        if not shared:
            continue
        c = contrast(x, ref, -1, rules, exact=False)  # lower loss is better
        out.append({"scenario": scn, "config": cfg, "step": int(steps[-1]), "beta2_from": lo, "beta2_to": hi,
                    "n_paired": c["n_paired"], "loss_from": float(ref[shared].mean()), "loss_to": float(x[shared].mean()),
                    "change_pct": -c["gap_pct"], "ci_low": -c["ci_high"], "ci_high": -c["ci_low"]})
    return pd.DataFrame(out, columns=BETA2_COLUMNS)


def beta2_line(study_dirs) -> list[str]:
    """The README's line comparing horizon studies that differ only in beta2 (``dtype-bench findings
    --horizon A B``), or none where they are not such a pair; ValueError where the recipes differ in
    more than beta2 (scenario, data, steps, size), naming what differs."""
    frames, recipe = {}, {}
    for d in map(Path, study_dirs):
        df = load_study(d)
        recs = df[df["status"].isin(MEASURED)]
        beta2 = sorted({float(v) for v in recs.get("run.beta2", pd.Series(dtype=float)).dropna()})
        if len(beta2) != 1:
            raise ValueError(f"{d}: its runs have beta2 {beta2 or 'unrecorded'}, not one value")
        frames[beta2[0]] = (d, evaluations(df))
        recipe[d] = {col: tuple(sorted({str(v) for v in recs.get(col, pd.Series(dtype=object)).dropna()}))
                     for col in ("scenario", "run.data", "run.steps", "run.size")}
    if len(frames) < 2:
        return []
    (d0, r0), *rest = recipe.items()
    for d, r in rest:
        differ = [k for k in r0 if r0[k] != r[k]]
        if differ:
            raise ValueError(f"{d0.name} and {d.name} differ in {', '.join(differ)}, not only beta2: their losses "
                             f"are not comparable")
    if len(frames) > 2:
        raise ValueError(f"{len(frames)} beta2 values ({', '.join(f'{k:g}' for k in sorted(frames))}): "
                         "the line compares two")
    t = across_beta2({k: ev for k, (_, ev) in frames.items()})
    if t.empty:
        return []
    rules = Rules()
    lo, hi = sorted(frames)
    t = t.sort_values("change_pct")
    parts = "; ".join(f"{r.config} {r.loss_from:.3f} -> {r.loss_to:.3f} ({r.change_pct:+.2f}%"
                      + (f" [{r.ci_low:+.2f}, {r.ci_high:+.2f}]" if np.isfinite(r.ci_low) else "")
                      + f", {r.n_paired} seed{'s' * (r.n_paired > 1)})" for r in t.itertuples())
    steps = "/".join(str(s) for s in sorted(t["step"].unique()))
    few = t[t["n_paired"] < rules.min_seeds]
    return [f"Across beta2, the horizon arms `{frames[lo][0].name}` (beta2 {lo:g}) and `{frames[hi][0].name}` "
            f"(beta2 {hi:g}), the same recipe otherwise: each config's val loss at step {steps}, beta2 {lo:g} -> "
            f"{hi:g}, paired by seed (< 0 worse at {hi:g}; [{1 - 2 * rules.alpha:.0%} t-interval] at "
            f"{rules.min_seeds}+ shared seeds): {parts}."
            + (f" Below {rules.min_seeds} shared seeds ({', '.join(few['config'])}) the change is a point, its seed "
               f"noise unmeasured." if len(few) else "")]
