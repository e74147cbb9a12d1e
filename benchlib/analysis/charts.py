"""Altair charts of the analysis tables (seed 000's visualisations), one function per chart over a
tidy frame (a summary, ``loss_curves``, ``config_stats``); ``save`` writes SVG/PNG through
vl-convert, ``show`` displays a chart with a static image beside its spec. Configs with an
unhealthy run are drawn apart and never on a frontier; no frontier where quality is not established.
Where things go is computed before Vega draws them: axis domains that follow the healthy runs
(``padded_domain``) and direct labels that do not overlap (``place_labels``; Vega-Lite does not
avoid text collisions), in the pixel space of a plot of known size.
"""
from __future__ import annotations

import base64
import functools
import json
import os
import re
import warnings
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd

from benchlib.core.env import STATIC_CHARTS_ENV
from benchlib.analysis.svg import lean_svg
from benchlib.analysis.tables import BASELINE, HEADLINE, NOT_JUDGED, SAFE, config_order, label, pareto_front

WIDTH = 360
STABILITY_CONFIGS = ("fp16_naive", "fp16_naive_noscale", "fp16_fp16_states", "fp16_fp16_states_noscale", BASELINE)
UNITS = {"memory": "GiB"}
SHAPES = {"frontier": "diamond", "dominated": "circle", "not ranked": "circle", "excluded (failed run)": "cross"}
FAILED_GREY = "#8c8c8c"  # a failed config without a verdict: grey and hollow
LETTER_PX = 10  # vertical distance between scenario letters in one row of the flip chart
VERDICT = {"failed": "#d62728", "degraded": "#ff7f0e", "worse": "#fd8d3c", "inconclusive": "#fdae6b", "untestable": "#9e9ac8",
           "not tested": "#bdbdbd", "reference": "#a1d99b", "safe": "#31a354"}
"""The comparison's verdicts (``recommend.safety``), worst first, and their colours; no unsafe one is grey."""


def verdict_scale() -> alt.Scale:
    """One fixed scale of ``VERDICT``, so panels that share it agree."""
    return alt.Scale(domain=list(VERDICT), range=list(VERDICT.values()))


def verdict_colours(marks: Iterable[str]) -> tuple[list[str], list[str]]:
    """The marks present (``failed(diverged)``, ``safe``, ...), worst first, and their colours."""
    def kind(m: str) -> str:
        return m.split("(")[0]
    present = sorted(set(marks), key=lambda m: (list(VERDICT).index(kind(m)) if kind(m) in VERDICT else len(VERDICT), m))
    return present, [VERDICT.get(kind(m), "#bdbdbd") for m in present]


def with_verdicts(summary: pd.DataFrame, verdicts: pd.DataFrame) -> pd.DataFrame:
    """``summary`` (one scenario's) with ``verdict`` and ``mark`` (``answer.mark``) per config from the
    safety frame ``verdicts``, and the Pareto flags recomputed over the candidates safe here only
    (where they are set), so no chart or sentence puts an unsafe config on a frontier."""
    from benchlib.analysis.answer import mark  # answer -> recommend -> tables: not importable from tables
    v = {r["config"]: (r["verdict"], mark(r["verdict"], str(r.get("reason") or "")))
         for _, r in verdicts.iterrows()}
    out = summary.assign(verdict=[v.get(c, ("not tested",))[0] for c in summary["config"]],
                         mark=[v.get(c, (None, "not tested"))[1] for c in summary["config"]])
    is_mean = out["seed"] == "mean"
    safe = is_mean & out["verdict"].isin(SAFE) & out["role"].fillna("candidate").eq("candidate")
    q = out.loc[safe, "quality"] * (1 if out["quality_higher_is_better"].iloc[0] else -1)
    for col, x in (("pareto_throughput", out.loc[safe, "throughput"]), ("pareto_memory", -out.loc[safe, "memory"])):
        if out[col].notna().any():
            out.loc[is_mean, col] = False
            out.loc[safe, col] = pareto_front(x, q)
    return out


def _color(configs: Iterable[str], legend: bool = True, channel=alt.Color, keep_order: bool = False):
    """One colour per config in registry order (``keep_order``: in the order given, so that a chart of
    fewer or more configs can keep another chart's colours); tableau20 (paired hues) only past 10 configs."""
    order = list(configs) if keep_order else config_order(configs)
    scale = alt.Scale(domain=order, scheme="tableau10" if len(order) <= 10 else "tableau20")
    return channel("config:N", sort=order, scale=scale,
                   legend=alt.Legend(title="config", columns=1) if legend else None)


def _means(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[summary["seed"] == "mean"].copy()


def _unit(summary: pd.DataFrame, metric: str) -> str:
    if metric == "throughput" and summary["throughput_unit"].notna().any():
        return summary["throughput_unit"].dropna().iloc[0]
    return UNITS.get(metric, "")


def _qname(summary: pd.DataFrame, labelled: bool = True) -> str:
    name = summary["quality_name"].dropna().iloc[0] if summary["quality_name"].notna().any() else "quality"
    return label(name) if labelled else name


def _quality_title(summary: pd.DataFrame) -> str:
    hib = bool(summary["quality_higher_is_better"].iloc[0]) if "quality_higher_is_better" in summary else True
    return f"{_qname(summary, False)} ({'higher' if hib else 'lower'} is better)"


def chart_title(text: str, subtitle=alt.Undefined, **kw) -> alt.Title:
    """Titles start at the left edge, where a reader starts, with the notes under them."""
    return alt.Title(text, subtitle=subtitle or alt.Undefined, anchor="start", **kw)


def no_data_chart(message: str, title: str) -> alt.Chart:
    """A chart that says why there is nothing to draw, under the title the chart would have."""
    return alt.Chart(pd.DataFrame({"text": [message]})).mark_text(size=14).encode(text="text:N").properties(
        width=WIDTH, height=60, title=chart_title(title))


# ---- placement ---------------------------------------------------------------------------
CHAR_PX = 5.6  # width of a character of a 10 px sans-serif config name, rounded up
LINE_PX = 12.0  # height of a 10 px label line with a pixel of leading on each side


def padded_domain(values: Sequence[float], pad: float = 0.12, min_span: float = 1e-9) -> list[float]:
    """[lo, hi] of the finite values widened by ``pad`` of their span on each side; a single
    value (or none spread) gets a span of 1% of its magnitude so it is drawn mid-axis."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if not len(v):
        return [0.0, 1.0]
    lo, hi = float(v.min()), float(v.max())
    span = hi - lo
    if span <= min_span:
        span = max(abs(lo) * 0.02, 1e-6)
        return [lo - span / 2, hi + span / 2]
    return [lo - pad * span, hi + pad * span]


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(px: Sequence[float], py: Sequence[float], texts: Sequence[str], width: float, height: float,
                 gap: float = 6.0, marker: float = 5.0, max_shift: int = 12
                 ) -> list[tuple[float, float, bool, float]]:
    """For each point (pixel ``px``, ``py``; y grows downwards) the left edge and vertical
    centre of its label, whether it moved off its point's row (then a leader line is worth
    drawing) and where that line meets the label (its edge nearer the point).

    Greedy, left to right (a point's right is where its label is looked for first, so the
    leftmost claim theirs before a cluster to their right spreads out): each label tries right
    of its point, then left, then the same one row further up or down at a time, and takes the
    first box that stays in the plot and touches no placed label and no other point; where none
    is free within ``max_shift`` rows it takes the in-plot candidate touching the fewest."""
    n = len(texts)
    points = [(px[i] - marker, py[i] - marker, px[i] + marker, py[i] + marker) for i in range(n)]
    placed: list[tuple] = []
    out: list[tuple[float, float, bool, float] | None] = [None] * n
    for i in sorted(range(n), key=lambda k: (px[k], py[k])):
        w = CHAR_PX * len(texts[i])
        best, best_hits = None, None
        for k in range(2 * max_shift + 1):
            dy = LINE_PX * ((k + 1) // 2) * (1 if k % 2 else -1)  # 0, +1, -1, +2, -2 rows
            for x0 in (px[i] + gap, px[i] - gap - w):
                box = (x0, py[i] + dy - LINE_PX / 2, x0 + w, py[i] + dy + LINE_PX / 2)
                if box[0] < 0 or box[2] > width or box[1] < 0 or box[3] > height:
                    continue
                hits = sum(_overlaps(box, b) for b in placed) + sum(
                    _overlaps(box, p) for j, p in enumerate(points) if j != i)
                if best_hits is None or hits < best_hits:
                    best, best_hits = box, hits
                if hits == 0:
                    break
            if best_hits == 0:
                break
        if best is None:  # no room inside the plot at all: right of the point, clipped by the viewer
            best = (px[i] + gap, py[i] - LINE_PX / 2, px[i] + gap + w, py[i] + LINE_PX / 2)
        placed.append(best)
        centre = (best[1] + best[3]) / 2
        out[i] = (best[0], centre, abs(centre - py[i]) > 0.5, best[0] if best[0] >= px[i] else best[2])
    return out


# ---- per experiment ------------------------------------------------------------------------
def metric_bar(summary: pd.DataFrame, metric: str, title: str | None = None) -> alt.Chart:
    """Mean per config, +-1 std over seeds (>= 2 seeds); fp32_baseline grey, excluded configs red."""
    title = title or f"{metric}: mean +- std over seeds"
    d = _means(summary).dropna(subset=[metric])
    if d.empty:
        return no_data_chart(why_none(summary, f"no {metric}"), title)
    lo, hi = _seed_range(d, metric)
    kind = np.where(d["excluded"].fillna(False).astype(bool), "excluded (failed run)",
                    np.where(d["config"] == BASELINE, BASELINE, "config"))
    d = d.assign(lo=lo, hi=hi, kind=kind)[
        ["config", metric, "lo", "hi", "kind", "n_seeds", f"{metric}_rel", "excluded_reason"]]
    unit = _unit(summary, metric)
    xtitle = f"{metric} ({unit})" if unit else metric
    base = alt.Chart(d).encode(y=alt.Y("config:N", sort=config_order(d["config"]), title=None))
    bars = base.mark_bar().encode(
        x=alt.X(f"{metric}:Q", title=xtitle),
        color=alt.Color("kind:N", title=None, scale=alt.Scale(domain=["config", BASELINE, "excluded (failed run)"],
                                                              range=["#4c78a8", "#9e9e9e", "#d62728"])),
        tooltip=["config:N", alt.Tooltip(f"{metric}:Q", format=".4g"), alt.Tooltip(f"{metric}_rel:Q", format=".2f"),
                 "n_seeds:Q", "excluded_reason:N"])
    err = base.transform_filter("datum.n_seeds >= 2").mark_errorbar(ticks=True).encode(
        x=alt.X("lo:Q", title=xtitle), x2="hi:Q")
    one = (d["n_seeds"] < 2).all()
    return (bars + err).properties(width=WIDTH, title=chart_title(title, "one seed per config: no error bars" if one
                                                               else alt.Undefined))


def throughput_bar(summary: pd.DataFrame) -> alt.Chart:
    return metric_bar(summary, "throughput", "Throughput by config (mean +- std over seeds)")


def memory_bar(summary: pd.DataFrame) -> alt.Chart:
    return metric_bar(summary, "memory", "Peak memory by config (mean +- std over seeds)")


def _established(summary: pd.DataFrame) -> bool:
    return bool(summary["quality_established"].iloc[0])


def _seed_range(d: pd.DataFrame, col: str) -> tuple[pd.Series, pd.Series]:
    """mean +- 1 std over seeds; NaN where fewer than 2 seeds."""
    std = d[f"{col}_std"].where(d["n_seeds"] >= 2)
    return d[col] - std, d[col] + std


def _num(v: float) -> str:
    """4 significant digits, no exponent for large throughputs (465,428 not 4.654e+05)."""
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def frontier_panel(summary: pd.DataFrame, x: str, errors: bool, recommended: str | None = None,
                   width: int = WIDTH, height: int = 260) -> tuple[alt.LayerChart, list[str]]:
    """One frontier plot (``x`` = throughput or memory against quality) and its notes. The quality
    axis spans the healthy configs only, so one failed run (a val loss of 9.4 beside 4.3) cannot
    squash the others: failed configs inside it are drawn hollow, those outside are named in the
    notes. Labels do not overlap (``place_labels``); ``recommended`` is ringed."""
    d = _means(summary).dropna(subset=[x, "quality"]).reset_index(drop=True)
    failed = d["excluded"].fillna(False).astype(bool)
    point = np.where(failed, "excluded (failed run)",
                     np.where(d[f"pareto_{x}"].fillna(False).astype(bool), "frontier",
                              "dominated" if _established(summary) else "not ranked"))
    (xlo, xhi), (qlo, qhi) = _seed_range(d, x), _seed_range(d, "quality")
    d = d.assign(frontier=point == "frontier", point=point, xlo=xlo, xhi=xhi, qlo=qlo, qhi=qhi,
                 recommended=d["config"] == recommended)
    basis = d[~failed] if (~failed).any() else d
    ydom = padded_domain(pd.concat([basis["quality"], basis["qlo"], basis["qhi"]]))
    d["shown"] = d["quality"].between(*ydom)  # a failed run's speed is measured: only its quality can be wild
    xdom = padded_domain(pd.concat([d.loc[d["shown"], c] for c in (x, "xlo", "xhi")]))
    notes = [f"off scale: {r.config} ({_qname(summary)} {_num(r.quality)}, {x} {_num(getattr(r, x))}): "
             f"{(r.excluded_reason if isinstance(r.excluded_reason, str) else '').split(' (')[0] or 'failed'}"
             for r in d[~d["shown"]].itertuples()]
    shown = d[d["shown"]].reset_index(drop=True)
    text = [c + (" (recommended)" if rec else "") for c, rec in zip(shown["config"], shown["recommended"])]
    d["label"], d["lx"], d["ly"], d["moved"], d["ax"] = "", np.nan, np.nan, False, np.nan
    rows = d.index[d["shown"]]
    d.loc[rows, "label"] = text
    d.loc[rows, ["lx", "ly", "moved", "ax"]] = _label_spots(shown[x], shown["quality"], text, xdom, ydom, width, height)
    d = d.assign(**{k: d[k] if k in d else None for k in ("verdict", "mark")})[[
        "config", x, "quality", "frontier", "point", "verdict", "mark", "xlo", "xhi", "qlo", "qhi", "n_seeds", "excluded",
        "excluded_reason", "shown", "recommended", "label", "lx", "ly", "moved", "ax"]]
    xt, yt = f"{x} ({_unit(summary, x)})", _quality_title(summary)
    xe, ye = _axes(x, "quality", xdom, ydom, xt, yt)
    base = alt.Chart(d).transform_filter("datum.shown").encode(x=xe, y=ye)
    tip = ["config:N", alt.Tooltip(f"{x}:Q", format=".4g"), alt.Tooltip("quality:Q", format=".4g"), "n_seeds:Q",
           "excluded_reason:N"]
    line = alt.Chart(d[d["frontier"] & d["shown"]].sort_values(x)).mark_line(color="black", strokeDash=[4, 3]).encode(
        x=xe, y=ye, order=alt.Order(f"{x}:Q"))
    ring = base.transform_filter("datum.recommended").mark_point(size=380, filled=False, color="black",
                                                                 strokeWidth=2)
    layers = [*_point_layers(base, d, line, tip, "label:N"), ring]
    if errors and (d["n_seeds"] >= 2).any():
        bars = base.transform_filter("datum.n_seeds >= 2")
        layers += [bars.mark_errorbar().encode(x=alt.X("xlo:Q", title=xt), x2="xhi:Q"),
                   bars.mark_errorbar().encode(y=alt.Y("qlo:Q", title=yt), y2="qhi:Q")]
    elif errors:
        notes.append("one seed per config: no error bars")
    if recommended and not d["recommended"].any():
        notes.append(f"recommended config {recommended} has no point here")
    return alt.layer(*layers).properties(width=width, height=height), notes


def _axes(x: str, y: str, xdom, ydom, xtitle: str, ytitle: str) -> tuple[alt.X, alt.Y]:
    """Quantitative x and y encodings over exactly these domains."""
    return (alt.X(f"{x}:Q", scale=alt.Scale(domain=xdom, nice=False, zero=False), title=xtitle),
            alt.Y(f"{y}:Q", scale=alt.Scale(domain=ydom, nice=False, zero=False), title=ytitle))


def _label_spots(xs: pd.Series, ys: pd.Series, text: list, xdom, ydom, width: int, height: int) -> list[tuple]:
    """(label x, label y, moved, leader x) in data units per point of a ``width`` x ``height`` plot."""
    px = (xs - xdom[0]) / (xdom[1] - xdom[0]) * width
    py = (ydom[1] - ys) / (ydom[1] - ydom[0]) * height

    def to_x(v): return xdom[0] + v / width * (xdom[1] - xdom[0])
    return [(to_x(sx), ydom[1] - sy / height * (ydom[1] - ydom[0]), m, to_x(a))
            for sx, sy, m, a in place_labels(px.tolist(), py.tolist(), list(text), width, height)]


def _point_layers(base: alt.Chart, d: pd.DataFrame, line: alt.Chart, tip: list, text: str) -> list:
    """A frontier panel's line, label leaders, points, failed points and labels, in drawing order."""
    kinds = [k for k in SHAPES if k in set(d["point"])]
    shape = alt.Shape("point:N", title=None, scale=alt.Scale(domain=kinds, range=[SHAPES[k] for k in kinds]))
    pts = base.transform_filter("!datum.excluded").mark_point(filled=True, size=90).encode(
        color=_color(d["config"]), shape=shape, tooltip=tip)
    leaders = base.transform_filter("datum.moved").mark_rule(color="#999999", strokeWidth=0.7).encode(
        x2="ax:Q", y2="ly:Q")
    labels = base.mark_text(align="left", baseline="middle", fontSize=10).encode(
        x="lx:Q", y="ly:Q", text=text,
        color=alt.condition("datum.excluded", alt.value(FAILED_GREY), alt.value("#333333")))
    return [line, leaders, pts, _failed_points(base, d, shape, tip), labels]


def _failed_points(base: alt.Chart, d: pd.DataFrame, shape, tip: list) -> alt.Chart:
    """Hollow crosses of the failed configs: in their verdict's colour where known, else grey."""
    known = d.loc[d["excluded"].fillna(False).astype(bool), "verdict"].notna().any()
    pts = base.transform_filter("datum.excluded").mark_point(filled=False, size=90, strokeWidth=2,
                                                             color=alt.Undefined if known else FAILED_GREY)
    if not known:
        return pts.encode(shape=shape, tooltip=tip)
    return pts.encode(shape=shape, tooltip=[*tip, "mark:N"], stroke=alt.Stroke(
        "verdict:N", title="verdict", scale=verdict_scale()))


def _subtitle(summary: pd.DataFrame, notes: list[str] = ()) -> list[str] | alt.UndefinedType:
    """Why there is no frontier, where quality is not established, then the panel's notes."""
    lines = ([] if _established(summary) else [f"no frontier: {summary['note'].iloc[0]}"]) + list(notes)
    return lines or alt.Undefined


NO_SPEED = "speed not measured: the runs shared a GPU (--runs_per_gpu)"


def why_none(summary: pd.DataFrame, what: str) -> str:
    """Why a speed chart has nothing to draw: its runs shared a GPU, else no run finished."""
    shared = "shared_gpu" in summary and bool(summary["shared_gpu"].fillna(False).astype(bool).all())
    return f"{what}: {NO_SPEED}" if shared else f"{what}: no run finished"


def speed_unmeasured(summary: pd.DataFrame) -> bool:
    """No throughput anywhere because every run shared its GPU: quality is there to show."""
    return (summary["throughput"].isna().all() and "shared_gpu" in summary
            and bool(summary["shared_gpu"].fillna(False).all()) and summary["quality"].notna().any())


def quality_strip(summary: pd.DataFrame, title: str, recommended: str | None = None) -> alt.Chart:
    """Quality per config where no speed was measured: each seed a dot in its config's verdict
    colour (without verdicts: red failed, grey healthy), the mean a black tick, fp32_baseline a
    dashed line, ``recommended`` bold. The axis spans the healthy runs; a failed run beyond it
    is a triangle at its edge."""
    runs = summary[(summary["seed"] != "mean") & summary["quality"].notna()]
    failed = runs["health"].fillna("ok") != "ok"
    runs = runs.assign(failed=failed, **({} if "mark" in runs else {  # without verdicts: run health, said so
        "verdict": None, "mark": np.where(failed, "failed run", "healthy run")}))
    runs = runs[["config", "seed", "quality", "health", "failed", "verdict", "mark"]]
    means = _means(summary).dropna(subset=["quality"])[["config", "quality"]]
    order = [c for c in config_order(runs["config"]) if c in set(runs["config"])]
    lo, hi = padded_domain(runs.loc[~runs["failed"], "quality"] if (~runs["failed"]).any() else runs["quality"])
    runs = runs.assign(shape=np.where(runs["quality"] < lo, "triangle-left",
                                      np.where(runs["quality"] > hi, "triangle-right", "circle")))
    y = alt.Y("config:N", sort=order, title=None,
              axis=alt.Axis(labelFontWeight=alt.ExprRef(f"datum.value == '{recommended}' ? 'bold' : 'normal'")))
    x = alt.X("quality:Q", scale=alt.Scale(domain=[lo, hi], clamp=True, zero=False), title=_qname(summary))
    tip = ["config:N", "seed:N", alt.Tooltip("quality:Q", format=".4g"), "mark:N", "health:N"]
    fill = (alt.Fill("verdict:N", title="verdict", scale=verdict_scale()) if "mark" in summary else
            alt.Fill("mark:N", title=None, scale=alt.Scale(domain=["failed run", "healthy run"],
                                                           range=["#e45756", "#999999"])))
    dots = alt.Chart(runs).mark_point(filled=True, size=40, strokeWidth=0).encode(
        x=x, y=y, tooltip=tip, shape=alt.Shape("shape:N", scale=None), fill=fill)
    tick = alt.Chart(means[(means["quality"] >= lo) & (means["quality"] <= hi)]).mark_tick(
        color="black", thickness=2, size=14).encode(x=x, y=y, tooltip=["config:N", alt.Tooltip(
            "quality:Q", format=".4g", title="mean")])
    layers = [dots, tick]
    ref = means.loc[means["config"] == BASELINE, "quality"]
    if len(ref):
        layers.append(alt.Chart(pd.DataFrame({"quality": [float(ref.iloc[0])]})).mark_rule(
            strokeDash=[4, 3], color="#4c78a8").encode(x=alt.X("quality:Q", scale=alt.Scale(domain=[lo, hi]))))
    sub = [NO_SPEED, "colour: the config's verdict here" if "mark" in summary else "grey: a healthy seed; red: a failed one",
           "triangle: beyond the axis; black: mean; dashed: fp32_baseline"]
    sub += [f"bold: recommended ({recommended})"] if recommended else []
    return alt.layer(*layers).properties(width=260, height=max(12 * len(order), 120),
                                         title=chart_title(title, sub, fontSize=12))


def speed_only(summary: pd.DataFrame) -> bool:
    """A speed study's scenario (``run.judge_quality`` false): charts set throughput against memory."""
    return str(summary["note"].iloc[0]).startswith(NOT_JUDGED.split(":")[0])


def speed_memory_panel(summary: pd.DataFrame, title: str, width: int = WIDTH, height: int = 260) -> alt.Chart:
    """Throughput against peak memory per config where quality is not judged: the frontier are the
    healthy (and, with verdicts, safe) candidates none is both faster and leaner than."""
    d = _means(summary).dropna(subset=["throughput", "memory"]).reset_index(drop=True)
    if d.empty:
        return no_data_chart("no finished runs: no throughput-memory points", title)
    failed = d["excluded"].fillna(False).astype(bool)
    # where the summary carries verdicts (``with_verdicts``), only candidates safe here may be on it
    eligible = ~failed & (d["verdict"].isin(SAFE) & d["role"].fillna("candidate").eq("candidate")
                          if "verdict" in d else True)
    front = eligible.to_numpy() & pareto_front(d["throughput"].where(eligible), -d["memory"].where(eligible))
    d["point"] = np.where(failed, "excluded (failed run)", np.where(front, "frontier", "dominated"))
    xdom, ydom = padded_domain(d["throughput"]), padded_domain(d["memory"])
    d["lx"], d["ly"], d["moved"], d["ax"] = zip(*_label_spots(d["throughput"], d["memory"], d["config"], xdom, ydom,
                                                              width, height))
    d = d.assign(**{k: d[k] if k in d else None for k in ("verdict", "mark")})[[
        "config", "throughput", "memory", "point", "verdict", "mark", "excluded", "excluded_reason", "n_seeds", "lx", "ly",
        "moved", "ax"]]
    xe, ye = _axes("throughput", "memory", xdom, ydom, f"throughput ({_unit(summary, 'throughput')})",
                   "peak memory (GiB, lower is better)")
    base = alt.Chart(d).encode(x=xe, y=ye)
    tip = ["config:N", alt.Tooltip("throughput:Q", format=",.0f"), alt.Tooltip("memory:Q", format=".3g"),
           "n_seeds:Q", "excluded_reason:N"]
    line = alt.Chart(d[d["point"] == "frontier"].sort_values("throughput")).mark_line(
        color="black", strokeDash=[4, 3]).encode(x=xe, y=ye)
    one = (d["n_seeds"] < 2).all()
    safe = "verdict" in summary  # frontier of the configs shown safe here only
    sub = ["quality not judged here; hollow crosses: a failed run" + ("; one seed per config" if one else ""),
           "diamonds: frontier (none faster and leaner" + (", of the configs shown safe here)" if safe else ")"),
           *(["no frontier: no config is shown safe here"] if safe and not front.any() else [])]
    return alt.layer(*_point_layers(base, d, line, tip, "config:N")).properties(
        width=width, height=height, title=chart_title(title, sub, fontSize=12))


def quality_scatter(summary: pd.DataFrame, recommended: str | None = None) -> alt.Chart:
    """Throughput vs quality per config with the summary's Pareto frontier (``frontier_panel``);
    a quality strip where no speed was measured, throughput vs memory in a speed study."""
    if speed_unmeasured(summary):
        return quality_strip(summary, "Quality per config", recommended)
    if speed_only(summary):
        return speed_memory_panel(summary, "Throughput vs peak memory")
    if _means(summary)[["throughput", "quality"]].dropna().empty:
        return no_data_chart(why_none(summary, "no throughput-quality points"), "Throughput vs quality")
    panel, notes = frontier_panel(summary, "throughput", True, recommended)
    ring = "; ring: recommended" if recommended else ""
    return panel.properties(title=chart_title(
        f"Throughput vs quality (diamonds + dashed line: Pareto frontier; hollow crosses: failed{ring})",
        subtitle=_subtitle(summary, notes)))


def pareto_chart(summary: pd.DataFrame, recommended: str | None = None) -> alt.Chart:
    """Throughput-quality and memory-quality frontiers side by side (a speed study: one panel)."""
    if speed_only(summary):
        return speed_memory_panel(summary, "Pareto frontier: throughput vs peak memory")
    if _means(summary)[["throughput", "memory", "quality"]].dropna().empty:
        return no_data_chart(why_none(summary, "no Pareto frontier"), "Pareto frontiers")
    panels = []
    for x in ("throughput", "memory"):
        panel, notes = frontier_panel(summary, x, False, recommended)
        panels.append(panel.properties(title=alt.Title(f"{x} vs quality", subtitle=notes or alt.Undefined,
                                                       fontSize=12)))
    return alt.hconcat(*panels).resolve_scale(color="shared", shape="shared").properties(
        title=chart_title("Pareto frontiers: throughput-quality (higher x better), memory-quality (lower x better); "
                     "hollow crosses: failed, never on one", _subtitle(summary)))


def _curve_layers(curves: pd.DataFrame, divergences: pd.DataFrame, legend: bool) -> alt.LayerChart:
    """Mean loss per config, the min-max band where >= 2 seeds ran, red crosses at divergences, on
    a log scale (a BCE falls from 0.7 to 0.008: linear, all but the first steps are flat)."""
    data = pd.concat([curves.assign(kind="curve"), divergences.assign(kind="diverged")], ignore_index=True)
    data = data[["scenario", "config", "step", "loss", "loss_lo", "loss_hi", "n_runs", "seed", "kind",
                 *(["one_pass"] if "one_pass" in data else [])]]
    data = data[data["loss"] > 0]  # a log axis has no place for 0 (nor for a missing loss)
    data["loss_lo"] = data["loss_lo"].where(data["loss_lo"] > 0)
    logy = alt.Scale(type="log")
    base = alt.Chart().encode(x=alt.X("step:Q", title="step"))
    curve = "datum.kind == 'curve'"
    color = _color(curves["config"], legend)
    band = base.transform_filter(f"{curve} && datum.n_runs >= 2 && isValid(datum.loss_lo)").mark_area(
        opacity=0.25).encode(  # fill: no legend of faint swatches
        y=alt.Y("loss_lo:Q", scale=logy), y2="loss_hi:Q", fill=_color(curves["config"], legend=False, channel=alt.Fill))
    line = base.transform_filter(curve).mark_line().encode(
        y=alt.Y("loss:Q", title="training loss (log scale)", scale=logy), color=color,
        tooltip=["config:N", "step:Q", alt.Tooltip("loss:Q", format=".4g"), "n_runs:Q"])
    marks = base.transform_filter("datum.kind == 'diverged'").mark_point(
        shape="cross", size=120, filled=True, color="#d62728").encode(
        y=alt.Y("loss:Q", scale=logy), tooltip=["config:N", "seed:Q", alt.Tooltip("step:Q", title="diverged at step")])
    layers = [band, line, marks]
    if "one_pass" in curves and curves["one_pass"].notna().any():  # steps past it may re-read text
        layers.append(base.transform_filter(f"{curve} && isValid(datum.one_pass)").transform_aggregate(
            one_pass="min(one_pass)").mark_rule(strokeDash=[4, 3], color="#636363").encode(
            x="one_pass:Q", tooltip=[alt.Tooltip("one_pass:Q", title="one pass over the corpus read by step")]))
    return alt.layer(*layers, data=data).resolve_legend(fill="independent")


def _band_note(curves: pd.DataFrame) -> str | alt.UndefinedType:
    notes = ["one seed per config: no band"] if curves["n_runs"].max() < 2 else []
    if "one_pass" in curves and curves["one_pass"].notna().any():
        at = curves["one_pass"].dropna().unique()
        notes.append("dashed: one pass over the training corpus read" + (f" by step {int(at[0]):,}" if len(at) == 1 else "")
                     + "; later steps may read text again")
    return "; ".join(notes) if notes else alt.Undefined


def loss_curves_chart(curves: pd.DataFrame, divergences: pd.DataFrame) -> alt.Chart:
    """One scenario's training loss, a panel per config on a shared log axis (``_curve_layers``)."""
    title = "Training loss per config (log scale; line: mean over seeds; band: min-max; red cross: divergence)"
    if curves.empty:
        return no_data_chart("no steps.jsonl found: no loss curves", title)
    return _curve_layers(curves, divergences, legend=False).properties(
        width=190, height=120).facet(facet=alt.Facet("config:N", sort=config_order(curves["config"]), title=None),
                                     columns=4).properties(title=chart_title(title, _band_note(curves)))


# ---- across experiments --------------------------------------------------------------------
def stability_chart(curves: pd.DataFrame, divergences: pd.DataFrame,
                    configs: Iterable[str] = STABILITY_CONFIGS) -> alt.Chart:
    """Seed 000's stability comparison: the loss curves of the fp16-weight configs (and fp32), a
    panel per scenario with its own axes (an LM loss of ~11 would flatten a BCE below 1)."""
    configs = list(configs)
    c, d = curves[curves["config"].isin(configs)], divergences[divergences["config"].isin(configs)]
    title = "Stability: loss per scenario (own log-scale axis each; band: min-max over seeds; red cross: divergence)"
    if c.empty:
        return no_data_chart("no fp16-weight runs with steps.jsonl: no stability curves", title)
    return _curve_layers(c, d, legend=True).properties(width=180, height=130).facet(
        facet=alt.Facet("scenario:N", title="scenario"), columns=3).resolve_scale(
        x="independent", y="independent").properties(title=chart_title(title, _band_note(c)))


def _flip_flag(stats: pd.DataFrame, flips: list[dict] | None) -> pd.Series:
    keys = {(f["metric"], c) for f in flips or [] for c in (f["config"], f.get("other")) if c}
    return pd.Series([(m, c) in keys for m, c in zip(stats["metric"], stats["config"])], index=stats.index)


def _ties(d: pd.DataFrame) -> pd.DataFrame:
    """``d`` with ``n_tied`` per (metric, scenario, rank) and ``y``: the rank spread by up to
    +-0.35 within a tie, so tied configs' lines end side by side, not on one point."""
    d = d.assign(_order=d["config"].map({c: i for i, c in enumerate(config_order(d["config"]))}))
    d = d.sort_values(["metric", "scenario", "rank", "_order"])
    grp = d.groupby(["metric", "scenario", "rank"])["config"]
    n, k = grp.transform("size"), grp.cumcount()
    spread = np.where(n > 1, 0.7 * (k / (n - 1).clip(lower=1) - 0.5), 0.0)
    return d.assign(n_tied=n, y=d["rank"] + spread).drop(columns="_order")


def rank_slope(stats: pd.DataFrame, flips: list[dict] | None = None) -> alt.Chart:
    """Each config's rank (1 = best) per scenario, a panel per metric; configs in a flip beyond
    seed noise solid, the rest faded; ties side by side, marked "= n tied"."""
    title = "Rank of each config per scenario (solid: in a flip beyond seed noise; \"= n tied\": equal ranks)"
    d = stats.assign(flip=_flip_flag(stats, flips)).dropna(subset=["rank"])[
        ["scenario", "config", "metric", "rank", "flip", "mean"]]
    if d.empty:
        return no_data_chart("no ranks", title)
    d = _ties(d)
    d["tie"] = np.where(d["n_tied"] > 1, "= " + d["n_tied"].astype(str) + " tied", "")
    base = alt.Chart().encode(
        x=alt.X("scenario:O", title="scenario"),
        y=alt.Y("y:Q", scale=alt.Scale(domain=[0.5, d["rank"].max() + 0.5], reverse=True, nice=False),
                title="rank (1 = best)"),
        color=_color(d["config"]), detail="config:N",
        opacity=alt.condition("datum.flip", alt.value(1.0), alt.value(0.3)))
    tip = ["config:N", "scenario:N", "rank:Q", "n_tied:Q", alt.Tooltip("mean:Q", format=".4g"), "flip:N"]
    # one "= n tied" per tie, right of its points (one row per tie: the first config of it)
    tie = alt.Chart().transform_filter("datum.n_tied > 1").transform_aggregate(
        n="count()", groupby=["metric", "scenario", "rank", "tie"]).mark_text(
        align="left", dx=8, fontSize=10, fontWeight="bold", color="#333333").encode(
        x="scenario:O", y=alt.Y("rank:Q"), text="tie:N")
    layer = alt.layer(base.mark_line(), base.mark_point(filled=True).encode(tooltip=tip), tie, data=d)
    return layer.properties(width=220, height=240).facet(
        column=alt.Column("metric:N", sort=list(HEADLINE), title=None)).properties(title=chart_title(title))


def _no_data_why(cells: pd.DataFrame, metric: str, note: str = "") -> str:
    """Why a (scenario, metric) column of the heatmap has no value (``note``: the scenario's)."""
    if metric == "quality" and not cells["established"].any():
        return "quality not established"
    if metric == "throughput" and "shared their GPU" in note:
        return NO_SPEED
    if not (cells["config"] == BASELINE).any() or cells.loc[cells["config"] == BASELINE, "mean"].isna().all():
        return "no fp32_baseline value"
    return "no counted run"


def _heat_scale_type(gains: pd.Series) -> str:
    """'symlog' where the largest |gain| is over 10x the median non-zero one (a -100% failure
    would wash a -7% degradation out to white), else 'linear'."""
    g = gains.replace([np.inf, -np.inf], np.nan).abs().dropna()
    g = g[g > 0]
    return "symlog" if len(g) and g.max() > 10 * g.median() else "linear"


def _heat_panel(d: pd.DataFrame, metric: str, scenarios: list[str], order: list[str], why: dict) -> alt.LayerChart:
    """One metric's cells on a diverging scale of its own, symmetric about 0 (``_heat_scale_type``)."""
    lim = float(np.nanmax(np.abs(d["gain_pct"].replace([np.inf, -np.inf], np.nan)))) or 1.0
    base = alt.Chart(d).encode(x=alt.X("scenario:O", sort=scenarios, title="scenario"),
                               y=alt.Y("config:N", sort=order, title=None))
    rect = base.transform_filter("isValid(datum.gain_pct)").mark_rect().encode(
        color=alt.Color("gain_pct:Q", title=f"{metric}: % vs fp32",
                        scale=alt.Scale(type=_heat_scale_type(d["gain_pct"]), scheme="redblue", domain=[-lim, lim],
                                        domainMid=0)),
        tooltip=["config:N", "scenario:N", alt.Tooltip("gain_pct:Q", format="+.1f"), "n_ok:Q"])
    blank = base.transform_filter("!isValid(datum.gain_pct)").mark_rect(color="#f2f2f2")
    # a column with no value at all is one "no data" mark, not a row of cell labels under it
    text = base.transform_filter(alt.FieldOneOfPredicate("scenario", [s for s in scenarios if s not in why])
                                 ).mark_text(fontSize=9).encode(text="label:N")
    layers = [rect, blank, text]
    if why:  # a column without any value says so, across its cells
        mid = order[len(order) // 2]
        note = pd.DataFrame({"scenario": list(why), "config": mid, "text": [f"no data: {w}" for w in why.values()]})
        layers.append(alt.Chart(note).mark_text(angle=270, fontSize=11, fontWeight="bold", color="#555555").encode(
            x=alt.X("scenario:O", sort=scenarios), y=alt.Y("config:N", sort=order), text="text:N"))
    return alt.layer(*layers).properties(width=max(36 * len(scenarios), 72), title=metric)


def relative_heatmap(stats: pd.DataFrame, notes: Mapping[str, str] | None = None) -> alt.Chart:
    """Config x scenario per metric: % vs fp32_baseline, > 0 better, one colour scale per metric;
    'div' = every run diverged, 'fail' = only failed runs, 'n/l' = quality not established. An
    empty column says "no data: why", and the subtitle the scenario's note from ``notes``."""
    title = "Performance relative to fp32_baseline (%, > 0 = better; one colour scale per metric)"
    d = stats[["scenario", "config", "metric", "mean", "gain_pct", "n_ok", "n_diverged", "established"]].copy()
    if d["gain_pct"].isna().all():
        return no_data_chart("no fp32_baseline runs (or no established quality): nothing to compare against", title)
    failed = stats["n_failed"] if "n_failed" in stats else pd.Series(0, index=stats.index)
    d["label"] = [f"{round(g):+d}" if np.isfinite(g) else "n/l" if not est else
                  "div" if ok == 0 and nd else "fail" if nf else "" for g, ok, nd, nf, est in
                  zip(d["gain_pct"], d["n_ok"], d["n_diverged"], failed, d["established"])]
    order, scenarios = config_order(d["config"]), sorted(d["scenario"].unique())
    panels, lines = [], []
    for m in HEADLINE:
        dm = d[d["metric"] == m]
        why = {s: _no_data_why(g, m, (notes or {}).get(s, "")) for s, g in dm.groupby("scenario")
               if not np.isfinite(g["gain_pct"]).any()}
        # one line per reason (and, for quality, the scenario's gate note), its scenarios together
        said: dict[str, list[str]] = {}
        for s, w in why.items():
            note = (notes or {}).get(s, "").split(";")[0] if m == "quality" else ""
            said.setdefault(f"{w}" + (f" ({note})" if note else ""), []).append(s)
        lines += [f"{m} on {', '.join(ss)}: no data, {w}" for w, ss in said.items()]
        if len(why) == len(scenarios):
            panels.append(no_data_chart("no data: " + "; ".join(sorted(set(why.values()))), m).properties(width=150))
        elif len(dm):
            panels.append(_heat_panel(dm, m, scenarios, order, why))
    return alt.hconcat(*panels).resolve_scale(color="independent").properties(title=chart_title(title, lines))


def flip_chart(stats: pd.DataFrame, flips: list[dict] | None = None) -> alt.Chart:
    """Each config's rank range across scenarios per metric (letters: the scenario at each rank,
    one line per scenario); red = in a flip beyond seed noise."""
    title = "Rank changes across scenarios (letters: scenario; red: flip beyond seed noise)"
    d = stats.assign(flip=_flip_flag(stats, flips)).dropna(subset=["rank"])[["scenario", "config", "metric",
                                                                             "rank", "flip"]]
    if d.empty:
        return no_data_chart("no ranks", title)
    color = alt.Color("flip:N", scale=alt.Scale(domain=[True, False], range=["#d62728", "#9e9e9e"]),
                      title="flip beyond noise")
    y = alt.Y("config:N", sort=config_order(d["config"]), title=None)
    rule = alt.Chart().mark_rule(strokeWidth=3, opacity=0.6).encode(y=y, x=alt.X("min(rank):Q", title="rank"),
                                                                     x2="max(rank):Q", color=color)
    # one text layer per scenario, each on its own line (dy): letters at one rank would overlap
    scns = sorted(d["scenario"].unique())
    texts = [alt.Chart().transform_filter(alt.datum.scenario == s).mark_text(
        fontSize=10, fontWeight="bold", dy=LETTER_PX * (k - (len(scns) - 1) / 2)).encode(
        y=y, x="rank:Q", text="scenario:N", color=color) for k, s in enumerate(scns)]
    none = "no flip beyond seed noise in these data" if not flips else alt.Undefined
    return alt.layer(rule, *texts, data=d).properties(width=200, height={"step": LETTER_PX * (len(scns) + 1)}).facet(
        column=alt.Column("metric:N", sort=list(HEADLINE), title=None)).properties(title=chart_title(title, none))


# ---- output --------------------------------------------------------------------------------
def experiment_charts(summary: pd.DataFrame, curves: pd.DataFrame, divergences: pd.DataFrame) -> dict:
    """Seed 000's per-experiment list, by file name."""
    return {"throughput": throughput_bar(summary), "memory": memory_bar(summary),
            "throughput_vs_quality": quality_scatter(summary), "loss_curves": loss_curves_chart(curves, divergences),
            "pareto": pareto_chart(summary)}


def comparison_charts(stats: pd.DataFrame, flips: list[dict], curves: pd.DataFrame,
                      divergences: pd.DataFrame, notes: Mapping[str, str] | None = None) -> dict:
    """Seed 000's cross-experiment list, by file name (``notes``: for the heatmap)."""
    return {"rank_slope": rank_slope(stats, flips), "relative_heatmap": relative_heatmap(stats, notes),
            "flips": flip_chart(stats, flips), "stability": stability_chart(curves, divergences)}


def render(spec: dict, fmt: str, scale: float = 1.0) -> bytes:
    """PNG or SVG bytes of a Vega-Lite spec through vl-convert (offline, no browser)."""
    import vl_convert as vlc
    version = "v" + alt.SCHEMA_VERSION.lstrip("v").rsplit(".", 1)[0].replace(".", "_")
    if fmt == "png":
        return vlc.vegalite_to_png(spec, vl_version=version, scale=scale)
    if fmt == "svg":
        return lean_svg(compact_svg(vlc.vegalite_to_svg(spec, vl_version=version))).encode()
    raise ValueError(f"chart format {fmt!r}: use png or svg")


_GEOMETRY = re.compile(r'\b(d|transform|x|y|x1|x2|y1|y2|cx|cy|r|width|height|points)="([^"]*)"')
_LONG_DECIMAL = re.compile(r"(-?\d+\.\d)\d+")


def compact_svg(svg: str) -> str:
    """The SVG with its geometry rounded to a tenth of a pixel and its text untouched."""
    return _GEOMETRY.sub(lambda m: m[1] + '="' + _LONG_DECIMAL.sub(r"\1", m[2]) + '"', svg)


FORMATS = ("svg",)  # by default: 2-10x smaller than PNG and sharp at any zoom


def save(chart: alt.TopLevelMixin, stem: str | Path, formats: Iterable[str] = FORMATS,
         scale: float = 1.0) -> list[Path]:
    """Write ``stem.<fmt>`` for each format (png, svg); the spec is validated once."""
    spec = chart.to_dict()
    out = []
    for fmt in formats:
        p = Path(f"{stem}.{fmt}")
        p.parent.mkdir(parents=True, exist_ok=True)
        if not renderer_available():  # the spec itself: JupyterLab or vega-editor opens it
            p = p.with_suffix(".vl.json")
            p.write_text(json.dumps(spec))
            out.append(p)
            break
        p.write_bytes(render(spec, fmt, scale))
        out.append(p)
    return out


@functools.cache
def renderer_available() -> bool:
    """Whether vl-convert is installed; without it charts are written as Vega-Lite JSON."""
    try:
        import vl_convert  # noqa: F401
        return True
    except ImportError:
        warnings.warn("vl-convert-python is not installed: charts are saved as Vega-Lite JSON (.vl.json), "
                      "not PNG/SVG (pip install vl-convert-python)", stacklevel=3)
        return False


def title_of(chart: alt.TopLevelMixin | dict) -> str:
    """A chart's title as one line of text (the alternative text of its image)."""
    spec = chart if isinstance(chart, dict) else chart.to_dict(validate=False)
    title = spec.get("title", "")
    text = title.get("text", "") if isinstance(title, dict) else title
    return (" ".join(text) if isinstance(text, list) else str(text)).strip() or "chart"


class Shown:
    """A chart for notebook output: the Vega-Lite spec (unless ``interactive`` is False: then
    no copy of the data) plus a static PNG or SVG for viewers without JavaScript."""

    def __init__(self, chart: alt.TopLevelMixin, png: bytes | None, svg: str | None = None,
                 interactive: bool = True):
        self.chart, self.png, self.svg, self.interactive = chart, png, svg, interactive

    def _repr_mimebundle_(self, include=None, exclude=None):
        spec = {k: v for k, v in self.chart.to_dict(validate=False).items() if k != "$schema"}
        bundle = {"text/plain": f"<chart: {title_of(spec)}>"}
        if self.interactive or (self.png is None and self.svg is None):
            bundle["application/vnd.vegalite.v5+json"] = spec
        if self.png is not None:
            bundle["image/png"] = base64.b64encode(self.png).decode()
        if self.svg is not None:
            bundle["image/svg+xml"] = self.svg
        return bundle


def show(chart: alt.TopLevelMixin, png_path: str | Path | None = None, static: str = "png",
         interactive: bool | None = None) -> Shown:
    """Display object for ``chart``: its spec (``interactive``; None: unless ``STATIC_CHARTS_ENV``
    is 1) and the image ``save`` wrote at ``png_path`` (.png or .svg), else one rendered now."""
    if interactive is None:
        interactive = os.environ.get(STATIC_CHARTS_ENV) != "1"
    if png_path:
        for f in (Path(png_path).with_suffix(".png"), Path(png_path).with_suffix(".svg")):
            if f.exists():
                return Shown(chart, f.read_bytes() if f.suffix == ".png" else None,
                             f.read_text() if f.suffix == ".svg" else None, interactive)
    if static == "svg":
        return Shown(chart, None, render(chart.to_dict(), "svg").decode() if renderer_available() else None,
                     interactive)
    return Shown(chart, render(chart.to_dict(), "png") if renderer_available() else None, interactive=interactive)
