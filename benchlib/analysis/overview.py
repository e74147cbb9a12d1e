"""The charts a practitioner reads first for a study (``overview_charts``): quality against
throughput per scenario with the recommended config marked, where each config breaks, and what
flips between tasks; the detail charts are in ``charts``.
"""
from __future__ import annotations

import textwrap
from typing import Mapping

import altair as alt
import pandas as pd

from benchlib.analysis import charts as ch
from benchlib.analysis.answer import mark
from benchlib.analysis.tables import config_order

VERDICT = ch.VERDICT


def verdict_cells(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The grid's rows from a safety frame: status = the answer table's mark of the verdict."""
    return pd.DataFrame([{"scenario": r["scenario"], "config": r["config"], "verdict": r["verdict"],
                          "status": mark(r["verdict"], str(r.get("reason") or "")),
                          "reason": str(r.get("reason") or ""), "label": f"{int(r['ok'])}/{int(r['runs'])}"}
                         for _, r in verdicts.iterrows()])


def status_grid(summaries: Mapping[str, pd.DataFrame], verdicts: pd.DataFrame | None) -> alt.Chart:
    """Config x scenario: each cell's verdict (as the Findings say it) and its healthy runs / runs;
    a scenario whose reference did not learn says so in the subtitle."""
    title = "Where each config breaks: the comparison's verdict per config and scenario (text: healthy runs / runs)"
    notes = [line for s, summary in sorted(summaries.items()) if summary["learned"].iloc[0] is not True
             for line in textwrap.wrap(f"{s}: {summary['note'].iloc[0].split(';')[0]}", 100)]
    if verdicts is None or verdicts.empty:
        return ch.no_data_chart("no verdicts: the study has no comparison", title)
    d = verdict_cells(verdicts)
    present, colours = ch.verdict_colours(d["status"])
    base = alt.Chart(d).encode(x=alt.X("scenario:O", title="scenario", axis=alt.Axis(labelAngle=0, orient="top")),
                               y=alt.Y("config:N", sort=config_order(d["config"]), title=None))
    rect = base.mark_rect(stroke="white").encode(
        color=alt.Color("status:N", title="verdict", sort=present, scale=alt.Scale(domain=present, range=colours)),
        tooltip=["config:N", "scenario:N", "status:N", "label:N", "reason:N"])
    text = base.mark_text(fontSize=10).encode(
        text="label:N", color=alt.condition(alt.FieldOneOfPredicate("verdict", ["not tested", "reference", "untestable"]),
                                            alt.value("#333333"), alt.value("white")))
    return (rect + text).properties(width=max(48 * d["scenario"].nunique(), 96), title=ch.chart_title(title, notes))


def quality_throughput_panels(summaries: Mapping[str, pd.DataFrame],
                              recommended: Mapping[str, str] | None = None, columns: int = 3) -> alt.Chart:
    """One throughput-quality panel per scenario (``charts.frontier_panel``), its recommended
    config ringed."""
    recommended = recommended or {}
    panels = []
    for s, summary in sorted(summaries.items()):
        q = ch._qname(summary)
        if ch.speed_unmeasured(summary):
            panels.append(ch.quality_strip(summary, f"{s}: {q} per config", recommended.get(s)))
            continue
        if ch.speed_only(summary):
            panels.append(ch.speed_memory_panel(summary, f"{s}: throughput vs peak memory", width=300, height=220))
            continue
        if summary.loc[summary["seed"] == "mean", ["throughput", "quality"]].dropna().empty:
            panels.append(ch.no_data_chart(ch.why_none(summary, "no throughput-quality points"), f"{s}: {q} vs throughput"))
            continue
        panel, notes = ch.frontier_panel(summary, "throughput", True, recommended.get(s), width=300, height=220)
        if not bool(summary["quality_established"].iloc[0]):
            notes = ["no frontier: quality not established", *notes]
        if s not in recommended:
            notes.append("no config recommended")
        panels.append(panel.properties(title=ch.chart_title(f"{s}: {q} vs throughput", notes, fontSize=12)))
    title = ("Quality per config and scenario (no speed: the runs shared a GPU)"
             if all(ch.speed_unmeasured(sm) for sm in summaries.values()) else
             "Throughput vs peak memory per scenario (a speed study: quality not judged)"
             if all(ch.speed_only(sm) for sm in summaries.values()) else
             "Quality vs throughput per scenario (ring: recommended; diamonds + dashed line: Pareto frontier; hollow "
             "crosses: a failed run)")
    return alt.concat(*panels, columns=columns).resolve_scale(color="shared", shape="shared").properties(
        title=ch.chart_title(title))


def overview_charts(summaries: Mapping[str, pd.DataFrame], stats: pd.DataFrame, flips: list[dict],
                    recommended: Mapping[str, str] | None = None,
                    verdicts: pd.DataFrame | None = None) -> dict[str, alt.TopLevelMixin]:
    """The overview of a study, by name: ``quality_vs_throughput``, ``where_configs_break`` and
    ``flips``, from ``summaries`` (scenario -> ``tables.summarize``), ``stats``
    (``tables.config_stats``), the ``flips`` of ``comparison.json``, ``recommended`` (scenario ->
    config to ring, e.g. ``recommend.recommended_configs``) and ``verdicts`` (the safety frame)."""
    if verdicts is not None:  # every panel in the verdicts' colours, frontiers of safe configs only
        summaries = {s: ch.with_verdicts(sm, verdicts[verdicts["scenario"] == s]) for s, sm in summaries.items()}
    return {"quality_vs_throughput": quality_throughput_panels(summaries, recommended),
            "where_configs_break": status_grid(summaries, verdicts),
            "flips": ch.flip_chart(stats, flips)}


def answer_gaps(cells: pd.DataFrame, minimum: dict[str, float]) -> alt.Chart:
    """The answer table as a chart: per column of the table (a scenario, at a beta2) and candidate,
    the quality change against the reference (negative = worse) with its 90% t-interval, coloured by
    the verdict, beside the minimum effect that matters (dashed: ``minimum[column]``, in %). ``cells``:
    column, config, verdict, delta_pct, delta_lo, delta_hi."""
    d = cells.dropna(subset=["delta_pct"]).copy()
    title = "Quality change against the reference, with its 90% t-interval (negative = worse)"
    if d.empty:
        return ch.no_data_chart("no quality contrast to draw", title)
    d["lo"], d["hi"] = d["delta_lo"].fillna(d["delta_pct"]), d["delta_hi"].fillna(d["delta_pct"])
    d["minimum"] = [-minimum.get(c, float("nan")) for c in d["column"]]
    order = config_order(d["config"])
    base = alt.Chart().encode(y=alt.Y("config:N", sort=order, title=None))
    color = alt.Color("verdict:N", scale=ch.verdict_scale(), title="verdict")
    x = alt.X("delta_pct:Q", title="% vs the reference", scale=alt.Scale(zero=True, nice=True))
    bars = base.mark_rule(strokeWidth=2).encode(x=alt.X("lo:Q", title="% vs the reference"), x2="hi:Q", color=color)
    dots = base.mark_point(filled=True, size=45).encode(
        x=x, color=color, tooltip=["column:N", "config:N", "verdict:N", alt.Tooltip("delta_pct:Q", format="+.2f"),
                                   alt.Tooltip("lo:Q", format="+.2f"), alt.Tooltip("hi:Q", format="+.2f")])
    zero = alt.Chart().mark_rule(color="#888").encode(x=alt.datum(0))
    floor = alt.Chart().mark_rule(strokeDash=[4, 3], color="#d62728").encode(x="mean(minimum):Q")
    layer = alt.layer(floor, zero, bars, dots, data=d).properties(width=150, height=18 * len(order))
    return layer.facet(column=alt.Column("column:N", sort=list(dict.fromkeys(d["column"])), title=None),
                       ).resolve_scale(x="independent").properties(title=ch.chart_title(
                           title, ["dashed: the minimum effect that matters (0.5% of a loss, 1% of a score); each "
                                   "panel's scale is its own", "multi-label: micro-F1; macro-F1's interval is in the table"]))
