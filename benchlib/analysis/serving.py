"""``dtype-bench serve-table``: trained in one precision, served in another, from a study whose
runs set ``serve_modes`` (each record's ``serve`` section: ``inference.serve_quality``).

    dtype-bench serve-table executed/h100/serve [--out DIR]

Per run and inference mode: the quality the trained model reached in its own training precision,
the quality served in the mode, and the change in % of the former, signed so that positive is
better (a lower loss, a higher P@1 or accuracy). Per (scenario, training config, mode) the mean
change over seeds and the worst seed. The quality metric per task is ``QUALITY`` (P@1 for
multi-label: micro-F1 is 0 wherever no logit crosses 0, which says nothing about the ranking).
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import pandas as pd

from benchlib.analysis.charts import chart_title, no_data_chart
from benchlib.analysis.outputs import study_records, write_outputs
from benchlib.analysis.scaling import markdown_table
from benchlib.analysis.stats import Rules
from benchlib.core.dtypes import INFER_MODES
from benchlib.core.records import describe_environment
from benchlib.core.scenarios import get_scenario

QUALITY = {"clm": "val_loss", "mlm": "val_loss", "multilabel": "p_at_1", "singlelabel": "accuracy"}
"""The quality metric per task (P@1 for multi-label, see the module's doc)."""
LOWER_IS_BETTER = {"val_loss"}


def runs_table(records: list[dict]) -> pd.DataFrame:
    """One row per (run, mode) of every record with a ``serve`` section."""
    rows = []
    for rec in records:
        metric = QUALITY[get_scenario(rec["scenario"]).task]
        sign = -1.0 if metric in LOWER_IS_BETTER else 1.0
        for mode, s in (rec.get("serve") or {}).items():
            ok = s.get("status") == "ok"
            served = s["metrics"].get(metric) if ok else None
            diff = s["minus_trained"].get(metric) if ok else None
            trained = served - diff if served is not None and diff is not None else math.nan
            change = sign * 100 * diff / abs(trained) + 0.0 if diff is not None and trained else math.nan  # no -0
            rows.append({"scenario": rec["scenario"], "config": rec["config"], "seed": rec["seed"],
                         "run_status": rec["status"], "mode": mode, "status": s.get("status"),
                         "reason": s.get("reason") or "", "metric": metric, "trained": trained,
                         "served": math.nan if served is None else served, "change_pct": change})
    if not rows:
        raise ValueError("no record has a serve section: run the study with serve_modes (e.g. 'fp32,bf16,fp16')")
    return pd.DataFrame(rows)


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (scenario, config, mode): seeds served, mean change (% of the trained quality,
    positive = better) and the worst seed's, and the statuses other than ok."""
    def agg(g: pd.DataFrame) -> pd.Series:
        ok = g[g["status"] == "ok"]
        bad = g.loc[g["status"] != "ok", "status"].value_counts()
        return pd.Series({"metric": g["metric"].iloc[0], "seeds": len(ok), "trained_mean": ok["trained"].mean(),
                          "served_mean": ok["served"].mean(), "change_pct_mean": ok["change_pct"].mean(),
                          "change_pct_worst": ok["change_pct"].min(),
                          "not_ok": ", ".join(f"{k} x{v}" for k, v in bad.items())})
    order = {m: i for i, m in enumerate(INFER_MODES)}
    out = runs.groupby(["scenario", "config", "mode"], sort=False).apply(agg, include_groups=False).reset_index()
    out["_m"] = out["mode"].map(order)
    return out.sort_values(["scenario", "config", "_m"]).drop(columns="_m").reset_index(drop=True)


def chart(summ: pd.DataFrame, environment: str = "") -> alt.Chart:
    """A heat map per scenario: training config (rows) x inference mode (columns), coloured by
    the mean change of quality in % (diverging at 0; red = worse when served so)."""
    title = "Trained in one precision, served in another: quality change"
    d = summ[summ["change_pct_mean"].notna()].copy()
    if d.empty:
        return no_data_chart("no served mode with a quality to compare", title)
    lim = max(float(d["change_pct_mean"].abs().max()), Rules().min_effect_score_pct)  # changes below it stay pale
    modes = [m for m in INFER_MODES if m in set(d["mode"])]
    base = alt.Chart().encode(x=alt.X("mode:N", sort=modes, title="served in"),
                              y=alt.Y("config:N", title="trained in"))
    cells = base.mark_rect().encode(
        color=alt.Color("change_pct_mean:Q", title="quality change (%)",
                        scale=alt.Scale(scheme="redblue", domain=[-lim, lim])),
        tooltip=["scenario:N", "config:N", "mode:N", "metric:N", alt.Tooltip("change_pct_mean:Q", format=".3f"),
                 alt.Tooltip("change_pct_worst:Q", format=".3f"), "seeds:Q", "not_ok:N"])
    text = base.mark_text(fontSize=10).encode(text=alt.Text("change_pct_mean:Q", format=".2f"))
    subtitle = [s for s in (environment,) if s] + [
        "mean over seeds of 100 x (served - trained) / trained, signed so that positive is better; "
        "the metric per task: val loss (A, B), P@1 (C, D), accuracy (E, F)"]
    return (alt.layer(cells, text, data=d).properties(width=38 * len(modes), height=22 * d["config"].nunique())
            .facet(facet=alt.Facet("scenario:N", title=None), columns=3)
            .properties(title=chart_title([title], subtitle)))


@dataclass
class Serving:
    runs: pd.DataFrame
    summary: pd.DataFrame
    chart: alt.Chart
    markdown: str
    files: list


def analyze(study_dir: str | Path, out_dir: str | Path | None = None) -> Serving:
    """``serve.csv`` (the summary), ``serve_runs.csv`` (every run and mode), ``serve.md`` and
    the heat map of the records under ``study_dir``, in ``out_dir`` (default ``study_dir/serve``)."""
    root, records = study_records(study_dir)
    runs = runs_table(records)
    summ = summary(runs)
    env = describe_environment(records)
    md = "\n".join(["# Trained in one precision, served in another", "", env, "",
                    "change_pct = 100 x (served - trained) / |trained|, signed so that positive is better; per "
                    "(scenario, training config, inference mode) the mean over seeds and the worst seed.", "",
                    markdown_table(summ)]) + "\n"
    out = Path(out_dir) if out_dir else root / "serve"
    c = chart(summ, env)
    files = write_outputs(out, "serve", summ, md, c)
    runs.to_csv(out / "serve_runs.csv", index=False)
    return Serving(runs, summ, c, md, files + [out / "serve_runs.csv"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dtype-bench serve-table", description=__doc__.splitlines()[0])
    p.add_argument("study_dir", help="a study whose runs set serve_modes, e.g. executed/h100/serve")
    p.add_argument("--out", default=None, help="output folder (default STUDY_DIR/serve)")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    res = analyze(ns.study_dir, ns.out)
    print(res.markdown)
    print("files: " + ", ".join(str(f) for f in res.files))
    return 0
