"""Running the analysis on a study, from folders of records to files: stage 1 (``analyze_study``:
``<scenario>/summary.csv`` and charts), stage 2 (``compare`` / ``compare_study``: ``comparison.json``,
tables and charts) and the CLI (``dtype-bench analyze`` / ``compare``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pandas as pd

from benchlib.analysis import answer, charts as ch
from benchlib.analysis.charts import FORMATS
from benchlib.analysis.tables import (HEADLINE, config_order, config_stats, excluded_configs, gated, group_ranks, groups,
                       learned_scenarios, load_study, loss_curves, rank_correlations, recipe, resolve_study_dir,
                       scenario_notes, speed_only, summarize)
from benchlib.analysis.flips import flip_entries, order_reversals, scenario_models, stability_flips
from benchlib.analysis.stats import Rules
from benchlib.analysis.hypotheses import evaluate_all, verdict_table
from benchlib.analysis.overview import overview_charts
from benchlib.analysis.recommend import recommendations, recommended_configs, safety
from benchlib.core.argparser import ArgumentParser, field_help
from benchlib.core.records import json_safe
from benchlib.core.scenarios import get_scenario


@dataclass
class Experiment:
    scenario: str
    summary: pd.DataFrame
    curves: pd.DataFrame
    divergences: pd.DataFrame
    charts: dict
    out_dir: Path
    files: list


def mean_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The ``mean`` rows with the headline columns, for display."""
    cols = ["config", "n_seeds", "status", "throughput", "throughput_std", "throughput_rel", "memory", "memory_std",
            "memory_rel", "quality", "quality_std", "quality_delta", "pareto_throughput", "pareto_memory",
            "excluded_reason"]
    return summary.loc[summary["seed"] == "mean", cols].reset_index(drop=True)


def analyze_experiment(df: pd.DataFrame, scenario: str, output_dir: str | Path,
                       formats: Iterable[str] = FORMATS, verdicts: pd.DataFrame | None = None) -> Experiment:
    """Write ``<output_dir>/<scenario>/summary.csv`` and the charts under ``plots/``; with ``verdicts``
    (the safety frame) in their colours, frontiers of safe configs only (``charts.with_verdicts``)."""
    summary = summarize(df, scenario)
    if verdicts is not None:
        summary = ch.with_verdicts(summary, verdicts[verdicts["scenario"] == scenario])
    curves, div = loss_curves(df[df["scenario"] == scenario])
    out = Path(output_dir) / scenario
    out.mkdir(parents=True, exist_ok=True)
    summary.to_csv(out / "summary.csv", index=False)
    charts = ch.experiment_charts(summary, curves, div)
    files = [out / "summary.csv"] + [p for n, c in charts.items() for p in ch.save(c, out / "plots" / n, formats)]
    return Experiment(scenario, summary, curves, div, charts, out, files)


def analyze_study(study_dir: str | Path, scenario: str | None = None, output_dir: str | Path | None = None,
                  formats: Iterable[str] = FORMATS, rules=None) -> dict[str, Experiment]:
    """Stage 1 for one scenario or every one, in the comparison's verdicts' colours."""
    root = resolve_study_dir(study_dir)
    df = load_study(root, rules=rules)
    verdicts = safety(df, rules or Rules())  # what the comparison (and the Findings) will say of each cell
    scns = [get_scenario(scenario).id] if scenario else sorted(df["scenario"].unique())
    return {s: analyze_experiment(df, s, output_dir or root, formats, verdicts) for s in scns}


@dataclass
class Comparison:
    stats: pd.DataFrame
    correlations: pd.DataFrame
    reversals: pd.DataFrame
    stability: pd.DataFrame
    safety: pd.DataFrame
    curves: pd.DataFrame
    divergences: pd.DataFrame
    result: dict
    """comparison.json"""
    charts: dict
    files: list


def _source(path) -> str:
    """A compared study's folder as comparison.json names it: relative to the repository where it
    lies inside it (the same file from every clone), else absolute."""
    p = Path(path).resolve()
    try:
        return p.relative_to(Path(__file__).resolve().parents[2]).as_posix()
    except ValueError:
        return str(p)


def compare(df: pd.DataFrame, rules=None, sources: Iterable[str] = (), tasks: dict | None = None) -> Comparison:
    """Stage 2 on a study frame: tables, flips, verdicts, recommendations and ``comparison.json``;
    ``tasks`` (source -> "lm" or "cls", the kind of scenario ``df`` kept of it) is recorded beside
    ``sources`` so that the comparison can be made again from the same runs."""
    rules = rules or Rules()
    df = gated(df, rules)
    stats = config_stats(df)
    corr = rank_correlations(stats)
    rev, stab = order_reversals(df, rules), stability_flips(df, rules)
    flips = flip_entries(stats, rev, stab, group_ranks(stats), set(df.loc[df["role"].eq("candidate"), "config"]),
                         scenario_models(df))
    recs, saf = recommendations(df, stats, rules)
    curves, div = loss_curves(df[df["config"].isin(ch.STABILITY_CONFIGS)])
    head = corr[(corr["a"] == "LM") & (corr["b"] == "CLS")].set_index("metric")
    tested = {m: {"reversed_pairs": int((rev["metric"] == m).sum()),
                  "testable": int(((rev["metric"] == m) & rev["support"].notna()).sum()),
                  "significant": int(((rev["metric"] == m) & rev["significant"]).sum()),
                  "flips": sum(1 for f in flips if f["metric"] == m and f.get("kind") == "reversal")} for m in HEADLINE}
    identity = df[["config", "config_recorded", "definition_hash", "cost_hash", "role"]].drop_duplicates()
    learned = learned_scenarios(df, rules)
    unhealthy = df[df["health"] != "ok"]
    result = {
        "sources": [_source(s) for s in sources], **({"tasks": {_source(s): t for s, t in tasks.items()}} if tasks else {}),
        "scenarios": sorted(df["scenario"].unique()),
        "recipe": recipe(df),
        "configs": config_order(df["config"].unique()), "groups": groups(df["scenario"].unique()),
        "runs": df["status"].value_counts().to_dict(),
        "notes": [f"{s}: {n}" for s, n in scenario_notes(df).items()],
        "learned": {r["scenario"]: {k: v for k, v in r.items() if k != "scenario"}
                    for r in learned.to_dict(orient="records")},
        "reliability": df.attrs.get("reliability", {}),
        "configs_by_definition": {c: {"recorded_as": sorted(set(g["config_recorded"])),
                                      "definition_hash": g["definition_hash"].iloc[0], "role": g["role"].iloc[0],
                                      "same_cost_as": sorted(set(identity.loc[identity["cost_hash"].isin(
                                          g["cost_hash"]) & (identity["config"] != c), "config"]))}
                                  for c, g in identity.groupby("config")},
        "quality_metric": {s: {k: q[k] for k in ("name", "higher_is_better", "headline", "degenerate", "usable",
                                                 "note")} for s, q in df.attrs["quality_metric"].items()},
        "health": {"runs": df["health"].value_counts().to_dict(),
                   "not_ok": unhealthy[["run_id", "scenario", "config", "seed", "status", "health",
                                        "health_reason"]].to_dict(orient="records")},
        "excluded": {s: {c: why for (ss, c), why in excluded_configs(df).items() if ss == s}
                     for s in sorted(df["scenario"].unique())},
        "method": {"statistics": "runs are named by their configuration's numeric definition "
                                 "(configs_by_definition); throughput and memory from every run that finished (ok, "
                                 "degraded, stalled); quality only in scenarios whose quality is established (learned "
                                 "by gap closed; configs told apart, or else judged against the reference only "
                                 "where a control is unmistakably degraded, with no rank or flip: see learned, "
                                 "reliability and quality_metric) and "
                                 "from runs that did not diverge, stall or degrade at train time (a config degraded "
                                 "against the reference still counts for ranks, flips and verdicts); diverged runs "
                                 "count for stability; configs with an unhealthy run are never safe, fastest or on "
                                 "a Pareto frontier (excluded), and only candidate configs are ever picked, fastest, "
                                 "on a frontier or in a flip; ranks are 1 = best in each metric's direction, and "
                                 "on quality a config with no counted run but a failed one ranks last",
                   "ranking_correlation": "Spearman rho (scipy.stats.spearmanr) between the LM scenarios' mean ranks "
                                          "and the classification scenarios' mean ranks, over configs ranked in both; "
                                          "every scenario pair in ranking_correlation_pairs; p: two-sided permutation "
                                          "test, exact over all pairings for <= 8 configs, else 20000 random ones",
                   "noise_test": rules.describe(), "reversals": tested,
                   "rules": {k: v for k, v in vars(rules).items()}},
        "ranking_correlation": {m: head["rho"].get(m) for m in HEADLINE},
        "ranking_correlation_p": {m: head["p"].get(m) for m in HEADLINE},
        "ranking_correlation_pairs": corr.to_dict(orient="records"),
        "flips": flips,
        "recommendations": recs,
        "hypotheses": evaluate_all(df, rules),
        "recommendation_evidence": saf.to_dict(orient="records"),
    }
    charts = ch.comparison_charts(stats, flips, curves, div, scenario_notes(df))
    return Comparison(stats, corr, rev, stab, saf, curves, div, json_safe(result), charts, [])


def write_comparison(comp: Comparison, output_dir: str | Path, formats: Iterable[str] = FORMATS) -> list:
    """comparison.json, the tables as CSV and the charts under plots/."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps(comp.result, indent=1, allow_nan=False))
    files = [out / "comparison.json"]
    for name, t in (("config_stats", comp.stats), ("rank_correlation", comp.correlations),
                    ("reversals", comp.reversals), ("stability_flips", comp.stability),
                    ("hypotheses", verdict_table(comp.result["hypotheses"])),
                    ("learned", pd.DataFrame.from_dict(comp.result["learned"], orient="index").rename_axis("scenario")
                     .reset_index())):
        t.to_csv(out / f"{name}.csv", index=False)
        files.append(out / f"{name}.csv")
    files += [p for n, c in comp.charts.items() for p in ch.save(c, out / "plots" / n, formats)]
    comp.files = files
    return files


def compare_study(*roots: str | Path, output_dir: str | Path | None = None, rules=None,
                  formats: Iterable[str] = FORMATS, tasks: dict | None = None) -> Comparison:
    """Stage 2 from folders of records, written to ``output_dir`` (default ``<first root>/comparison``);
    ``tasks`` (a root as given -> "lm" or "cls") keeps only that kind of scenario's runs of the root."""
    paths = [resolve_study_dir(r) for r in roots]
    kinds = {resolve_study_dir(r): t for r, t in (tasks or {}).items()}
    comp = compare(load_study(*paths, rules=rules, tasks=kinds), rules, sources=paths, tasks=kinds)
    write_comparison(comp, output_dir or paths[0] / "comparison", formats)
    return comp


def write_overview(study_dir: str | Path, output_dir: str | Path | None = None, rules=None,
                   formats: Iterable[str] = FORMATS) -> dict[str, tuple[str, list[Path]]]:
    """The study's ``overview.overview_charts`` under ``<output_dir>/plots/`` (default
    ``<study>/overview``); name -> (chart title, files)."""
    root = resolve_study_dir(study_dir)
    df = load_study(root, rules=rules)
    comp = compare(df, rules)
    summaries = {s: summarize(df, s) for s in sorted(df["scenario"].unique())}
    charts = overview_charts(summaries, comp.stats, comp.result["flips"], recommended_configs(comp.safety),
                             verdicts=comp.safety)
    out = Path(output_dir or root / "overview") / "plots"
    return {name: (ch.title_of(chart), ch.save(chart, out / name, formats)) for name, chart in charts.items()}


def speed_source(study_dir: Path) -> Path | None:
    """The study whose ``config_stats.csv`` gives a study's answer its speed: itself where it measured
    throughput, else the first speed study beside it (the same GPU kind), else None."""
    own = study_dir / "comparison" / "config_stats.csv"
    if own.is_file():
        st = pd.read_csv(own)
        if st.loc[st["metric"] == "throughput", "mean"].notna().any():
            return study_dir
    for other in sorted(p for p in study_dir.parent.iterdir() if p != study_dir and p.is_dir()):
        comp = other / "comparison" / "comparison.json"
        if comp.is_file() and (other / "comparison" / "config_stats.csv").is_file() \
                and speed_only(json.loads(comp.read_text())):
            return other
    return None


def answer_markdown(study_dir: Path) -> tuple[list[str], list[str], Path | None]:
    """A study's answer as the Findings open with it: (scope box, answer table and cell legend;
    absolute speed; the speed study); ValueError for a comparison without per-cell verdicts."""
    comparison = json.loads((study_dir / "comparison" / "comparison.json").read_text())
    speed = speed_source(study_dir)
    cells = answer.cells(comparison, pd.read_csv(speed / "comparison" / "config_stats.csv") if speed else None)
    where = f"`{speed.name}`" + ("" if speed == study_dir else ", the speed study beside it") if speed else ""
    out = answer.scope_box((study_dir.name, study_dir), (speed.name, speed) if speed else None)
    out += ["", *answer.answer_table(cells), "",
            "Cell: the comparison's verdict for (scenario, config)"
            + (f"; throughput x fp32 / x TF32 and peak GiB ({where})" if speed else "")
            + f"; {answer.quality_legend(cells)}. " + answer.controls_line(comparison)]
    note = answer.energy_note(speed) if speed else ""
    absolute = ([f"Absolute speed ({where}, mean over seeds; MFU against the GPU's dense bf16 peak"
                 + (f"; {note}" if note else "") + "):", "",
                 *answer.absolute_table(speed, config_order(cells["config"].unique()))] if speed else
                ["No speed measured alone on a GPU for this study."])
    return out, absolute, speed


def reference_notes(saf: pd.DataFrame, rules: Rules) -> list[str]:
    """A line per scenario whose quality reference is not the first of ``rules.reference_configs``:
    which config it is instead, so that a run left out (a corrupt record, a missing seed) never
    changes what the verdicts are measured against unsaid."""
    first, out = rules.reference_configs[0], []
    for s, g in saf.groupby("scenario", sort=True):
        refs = g["reference"].dropna()
        if len(refs) and refs.iloc[0] != first:
            runs = g.loc[g["config"] == first, "runs"]
            out.append(f"reference of {s}: {refs.iloc[0]}, not {first} ({first}: {_n(runs)} here; a reference "
                       f"needs {rules.min_seeds} counted seeds)")
    return out


def _n(runs: pd.Series) -> str:
    n = int(runs.iloc[0]) if len(runs) else 0
    return f"{n} run{'' if n == 1 else 's'}"


def main_analyze(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="dtype-bench analyze", description="Per-experiment summary.csv and charts "
                       "(seed 000 stage 1) from every result.json under a folder.")
    p.add_argument("study_dir", nargs="?", help="The study folder, e.g. executed/<study>.")
    p.add_argument("--results_dir", help="Seed 000's name for study_dir.")
    p.add_argument("--scenario", help="One scenario A-F (default: every scenario found).")
    p.add_argument("--output_dir", help="Where <scenario>/summary.csv and plots/ go (default: study_dir).")
    p.add_argument("--formats", default=",".join(FORMATS), help=f"Chart files to write: png, svg (default: {','.join(FORMATS)}).")
    ns = p.parse_args(argv)
    if not (ns.study_dir or ns.results_dir):
        p.error("give the study folder (positional or --results_dir)")
    exps = analyze_study(ns.study_dir or ns.results_dir, ns.scenario, ns.output_dir, ns.formats.split(","))
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        for s, e in exps.items():
            print(f"scenario {s}: {e.out_dir / 'summary.csv'}, {len(e.files) - 1} chart files in {e.out_dir / 'plots'}")
            print(f"  {e.summary['note'].iloc[0]}")
            print(mean_table(e.summary)[["config", "n_seeds", "throughput", "memory", "quality"]].to_string(index=False))
    return 0


def main_compare(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="dtype-bench compare", description="Cross-experiment ranking correlation, "
                       "flips beyond seed noise, hypothesis verdicts, recommendations (seed 000 stage 2).")
    p.add_argument("study_dir", nargs="*", help="Folders of records, e.g. executed/<study>.")
    p.add_argument("--lm_results", help="Seed 000: the folder of the LM experiment's records (its LM scenarios, "
                   "A and B, beside --cls_results').")
    p.add_argument("--cls_results", help="Seed 000: the folder of the classification experiment's records (its "
                   "classification scenarios, C-F, beside --lm_results').")
    p.add_argument("--output_dir", help="Where comparison.json, its tables and charts go (default: <first folder>/comparison).")
    p.add_argument("--conf", type=float, default=Rules.conf, help=field_help(Rules, "conf"))
    p.add_argument("--n_boot", type=int, default=Rules.n_boot, help=field_help(Rules, "n_boot"))
    p.add_argument("--min_seeds", type=int, default=Rules.min_seeds, help=field_help(Rules, "min_seeds"))
    p.add_argument("--formats", default=",".join(FORMATS), help=f"Chart files to write: png, svg (default: {','.join(FORMATS)}).")
    ns = p.parse_args(argv)
    roots = ns.study_dir + [r for r in (ns.lm_results, ns.cls_results) if r]
    if not roots:
        p.error("give a study folder, or --lm_results and --cls_results")
    # seed 000's form: the LM scenarios of one folder, the classification scenarios of the other (a
    # study with both kinds gives only its own side; two runs of one scenario letter would not pair)
    tasks = ({ns.lm_results: "lm", ns.cls_results: "cls"} if ns.lm_results and ns.cls_results
             and resolve_study_dir(ns.lm_results) != resolve_study_dir(ns.cls_results) else {})
    comp_rules = Rules(conf=ns.conf, n_boot=ns.n_boot, min_seeds=ns.min_seeds)
    comp = compare_study(*roots, output_dir=ns.output_dir, formats=ns.formats.split(","), rules=comp_rules,
                         tasks=tasks)
    r = comp.result
    print(comp.files[0])
    for line in r["notes"] + reference_notes(comp.safety, comp_rules):
        print(f"  {line}")
    print(f"ranking correlation LM vs CLS (Spearman): {r['ranking_correlation']}")
    print(f"flips beyond seed noise: {len(r['flips'])}")
    for f in r["flips"]:
        print(f"  {f['interpretation']}")
    with pd.option_context("display.width", 200, "display.max_colwidth", 60):
        print(verdict_table(r["hypotheses"])[["id", "verdict", "estimate", "ci_low", "ci_high"]].to_string(index=False))
    for line in r["recommendations"]["universal"]:
        print(f"  {line}")
    return 0
