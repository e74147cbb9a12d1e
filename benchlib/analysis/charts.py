"""Altair charts of the analysis tables (seed 000's visualisations).

One chart per function; each takes a tidy, already aggregated frame from ``analysis`` (a
summary, ``loss_curves``, ``config_stats``) and returns a chart. ``save`` writes PNG/SVG through
vl-convert (no network); ``show`` displays a chart that is interactive in JupyterLab and falls
back to the PNG in GitHub, nbconvert HTML and other viewers without JavaScript.

The charts follow the evidence gates of ``analysis``: configs with an unhealthy run (diverged,
degraded, stalled) are drawn apart and are never on a frontier, and where a scenario's quality
is not established no frontier is drawn and the title says so.
"""
from __future__ import annotations

import base64
import functools
import json
import warnings
from pathlib import Path
from typing import Iterable

import altair as alt
import numpy as np
import pandas as pd

from benchlib.analysis.tables import BASELINE, HEADLINE, config_order

WIDTH = 360
STABILITY_CONFIGS = ("fp16_naive", "fp16_naive_noscale", BASELINE)
UNITS = {"memory": "GiB"}
SHAPES = {"frontier": "diamond", "dominated": "circle", "not ranked": "circle", "excluded (failed run)": "cross"}
"""Point shapes on the frontier charts; "not ranked": the scenario's quality is not established."""


def _color(configs: Iterable[str], legend: bool = True, channel=alt.Color):
    """One colour per config, domain in registry order (charts over the same configs share
    colours). tableau20 pairs light/dark hues of one colour, so it is used only past 10."""
    order = config_order(configs)
    scale = alt.Scale(domain=order, scheme="tableau10" if len(order) <= 10 else "tableau20")
    return channel("config:N", sort=order, scale=scale,
                   legend=alt.Legend(title="config", columns=1) if legend else None)


def _means(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[summary["seed"] == "mean"].copy()


def _unit(summary: pd.DataFrame, metric: str) -> str:
    if metric == "throughput" and summary["throughput_unit"].notna().any():
        return summary["throughput_unit"].dropna().iloc[0]
    return UNITS.get(metric, "")


def _quality_title(summary: pd.DataFrame) -> str:
    name = summary["quality_name"].dropna().iloc[0] if summary["quality_name"].notna().any() else "quality"
    hib = bool(summary["quality_higher_is_better"].iloc[0]) if "quality_higher_is_better" in summary else True
    return f"{name} ({'higher' if hib else 'lower'} is better)"


def _empty(message: str) -> alt.Chart:
    return alt.Chart(pd.DataFrame({"text": [message]})).mark_text(size=14).encode(text="text:N").properties(
        width=WIDTH, height=60)


# ---- per experiment ------------------------------------------------------------------------
def metric_bar(summary: pd.DataFrame, metric: str, title: str | None = None) -> alt.Chart:
    """Mean per config over seeds, error bar = +-1 std over seeds; fp32_baseline in grey,
    configs excluded by the evidence gates (an unhealthy run) in red."""
    d = _means(summary).dropna(subset=[metric])
    if d.empty:
        return _empty(f"no ok runs: no {metric}")
    std = d[f"{metric}_std"].fillna(0)
    kind = np.where(d["excluded"].fillna(False).astype(bool), "excluded (failed run)",
                    np.where(d["config"] == BASELINE, BASELINE, "config"))
    d = d.assign(lo=d[metric] - std, hi=d[metric] + std, kind=kind)[
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
    err = base.mark_errorbar(ticks=True).encode(x=alt.X("lo:Q", title=xtitle), x2="hi:Q")
    return (bars + err).properties(width=WIDTH, title=title or f"{metric}: mean +- std over seeds")


def throughput_bar(summary: pd.DataFrame) -> alt.Chart:
    return metric_bar(summary, "throughput", "Throughput by config (mean +- std over seeds)")


def memory_bar(summary: pd.DataFrame) -> alt.Chart:
    return metric_bar(summary, "memory", "Peak memory by config (mean +- std over seeds)")


def _established(summary: pd.DataFrame) -> bool:
    return bool(summary["quality_established"].iloc[0])


def _frontier_panel(summary: pd.DataFrame, x: str, errors: bool) -> alt.LayerChart:
    d = _means(summary).dropna(subset=[x, "quality"])
    point = np.where(d["excluded"].fillna(False).astype(bool), "excluded (failed run)",
                     np.where(d[f"pareto_{x}"].fillna(False).astype(bool), "frontier",
                              "dominated" if _established(summary) else "not ranked"))
    d = d.assign(frontier=point == "frontier", point=point,
                 xlo=d[x] - d[f"{x}_std"].fillna(0), xhi=d[x] + d[f"{x}_std"].fillna(0),
                 qlo=d["quality"] - d["quality_std"].fillna(0), qhi=d["quality"] + d["quality_std"].fillna(0))
    d = d[["config", x, "quality", "frontier", "point", "xlo", "xhi", "qlo", "qhi", "n_seeds", "excluded_reason"]]
    xt, yt = f"{x} ({_unit(summary, x)})", _quality_title(summary)
    xe = alt.X(f"{x}:Q", scale=alt.Scale(zero=False, padding=12), title=xt)
    ye = alt.Y("quality:Q", scale=alt.Scale(zero=False, padding=12), title=yt)
    base = alt.Chart(d).encode(x=xe, y=ye)
    pts = base.mark_point(filled=True, size=90).encode(
        color=_color(d["config"]), shape=alt.Shape("point:N", title=None, scale=alt.Scale(
            domain=[k for k in SHAPES if k in set(point)], range=[v for k, v in SHAPES.items() if k in set(point)])),
        tooltip=["config:N", alt.Tooltip(f"{x}:Q", format=".4g"), alt.Tooltip("quality:Q", format=".4g"), "n_seeds:Q",
                 "excluded_reason:N"])
    line = alt.Chart(d[d["frontier"]].sort_values(x)).mark_line(color="black", strokeDash=[4, 3]).encode(
        x=xe, y=ye, order=alt.Order(f"{x}:Q"))
    labels = base.transform_filter("datum.frontier").mark_text(align="left", dx=7, fontSize=10).encode(text="config:N")
    layers = [line, pts, labels]
    if errors:
        layers += [base.mark_errorbar().encode(x=alt.X("xlo:Q", title=xt), x2="xhi:Q"),
                   base.mark_errorbar().encode(y=alt.Y("qlo:Q", title=yt), y2="qhi:Q")]
    return alt.layer(*layers).properties(width=WIDTH, height=260)


def _subtitle(summary: pd.DataFrame):
    """Why there is no frontier, where quality is not established."""
    return alt.Undefined if _established(summary) else f"no frontier: {summary['note'].iloc[0]}"


def quality_scatter(summary: pd.DataFrame) -> alt.Chart:
    """Throughput vs quality per config (error bars +-1 std over seeds); the Pareto frontier
    (diamonds, dashed line) from the summary's ``pareto_throughput``; configs with a failed run
    as crosses, never on it; no frontier where quality is not established."""
    if _means(summary)[["throughput", "quality"]].dropna().empty:
        return _empty("no ok runs: no throughput-quality points")
    return _frontier_panel(summary, "throughput", True).properties(
        title=alt.Title("Throughput vs quality (diamonds + dashed line: Pareto frontier; crosses: failed)",
                        subtitle=_subtitle(summary)))


def pareto_chart(summary: pd.DataFrame) -> alt.Chart:
    """The two frontiers side by side: throughput-quality and memory-quality."""
    if _means(summary)[["throughput", "memory", "quality"]].dropna().empty:
        return _empty("no ok runs: no Pareto frontier")
    return alt.hconcat(_frontier_panel(summary, "throughput", False), _frontier_panel(summary, "memory", False)
                       ).properties(title=alt.Title("Pareto frontiers: throughput-quality (higher x better), "
                                                    "memory-quality (lower x better); crosses: failed, never on one",
                                                    subtitle=_subtitle(summary)))


def _curve_layers(curves: pd.DataFrame, divergences: pd.DataFrame, legend: bool) -> alt.LayerChart:
    data = pd.concat([curves.assign(kind="curve"), divergences.assign(kind="diverged")], ignore_index=True)
    data = data[["scenario", "config", "step", "loss", "loss_lo", "loss_hi", "n_runs", "seed", "kind"]]
    base = alt.Chart().encode(x=alt.X("step:Q", title="step"))
    curve = "datum.kind == 'curve'"
    color = _color(curves["config"], legend)
    band = base.transform_filter(curve).mark_area(opacity=0.25).encode(  # fill: no legend of faint swatches
        y="loss_lo:Q", y2="loss_hi:Q", fill=_color(curves["config"], legend=False, channel=alt.Fill))
    line = base.transform_filter(curve).mark_line().encode(
        y=alt.Y("loss:Q", title="training loss", scale=alt.Scale(zero=False)), color=color,
        tooltip=["config:N", "step:Q", alt.Tooltip("loss:Q", format=".4g"), "n_runs:Q"])
    marks = base.transform_filter("datum.kind == 'diverged'").mark_point(
        shape="cross", size=120, filled=True, color="#d62728").encode(
        y="loss:Q", tooltip=["config:N", "seed:Q", alt.Tooltip("step:Q", title="diverged at step")])
    return alt.layer(band, line, marks, data=data).resolve_legend(fill="independent")


def loss_curves_chart(curves: pd.DataFrame, divergences: pd.DataFrame) -> alt.Chart:
    """Training loss per config: mean over seeds, band = min-max over seeds, red crosses =
    diverged runs at their divergence step (losses capped at 3x the initial loss)."""
    if curves.empty:
        return _empty("no steps.jsonl found: no loss curves")
    return _curve_layers(curves, divergences, legend=False).properties(
        width=190, height=120).facet(facet=alt.Facet("config:N", sort=config_order(curves["config"]), title=None),
                                     columns=4).properties(
        title="Training loss per config (line: mean over seeds; band: min-max; red cross: divergence)")


# ---- across experiments --------------------------------------------------------------------
def stability_chart(curves: pd.DataFrame, divergences: pd.DataFrame,
                    configs: Iterable[str] = STABILITY_CONFIGS) -> alt.Chart:
    """Seed 000's stability comparison: fp16_naive (and fp16_naive_noscale, fp32 for
    reference) loss curves, one panel per scenario, side by side."""
    configs = list(configs)
    c, d = curves[curves["config"].isin(configs)], divergences[divergences["config"].isin(configs)]
    if c.empty:
        return _empty("no fp16_naive runs with steps.jsonl: no stability curves")
    return _curve_layers(c, d, legend=True).properties(width=180, height=130).facet(
        facet=alt.Facet("scenario:N", title="scenario"), columns=3).properties(
        title="Stability: loss per scenario (band: min-max over seeds; red cross: divergence)")


def _flip_flag(stats: pd.DataFrame, flips: list[dict] | None) -> pd.Series:
    keys = {(f["metric"], f["config"]) for f in flips or []}
    return pd.Series([(m, c) in keys for m, c in zip(stats["metric"], stats["config"])], index=stats.index)


def rank_slope(stats: pd.DataFrame, flips: list[dict] | None = None) -> alt.Chart:
    """Slope graph: each config's rank (1 = best) per scenario, one panel per metric; configs
    in a flip beyond seed noise drawn solid, the rest faded."""
    d = stats.assign(flip=_flip_flag(stats, flips)).dropna(subset=["rank"])[
        ["scenario", "config", "metric", "rank", "flip", "mean"]]
    if d.empty:
        return _empty("no ranks")
    base = alt.Chart().encode(
        x=alt.X("scenario:O", title="scenario"),
        y=alt.Y("rank:Q", scale=alt.Scale(reverse=True, zero=False), title="rank (1 = best)"),
        color=_color(d["config"]), detail="config:N",
        opacity=alt.condition("datum.flip", alt.value(1.0), alt.value(0.3)))
    layer = alt.layer(base.mark_line(), base.mark_point(filled=True).encode(
        tooltip=["config:N", "scenario:N", "rank:Q", alt.Tooltip("mean:Q", format=".4g"), "flip:N"]), data=d)
    return layer.properties(width=220, height=240).facet(
        column=alt.Column("metric:N", sort=list(HEADLINE), title=None)).properties(
        title="Rank of each config per scenario (solid: in a flip beyond seed noise)")


def relative_heatmap(stats: pd.DataFrame) -> alt.Chart:
    """Config x scenario x metric: % vs fp32_baseline, signed so > 0 is better (faster, less
    memory, better quality); 'div' = every run diverged; 'n/l' = quality not established (the
    scenario did not learn, or its records carry no trivial baseline)."""
    d = stats[["scenario", "config", "metric", "gain_pct", "n_ok", "n_diverged", "established"]].copy()
    if d["gain_pct"].isna().all():
        return _empty("no fp32_baseline runs (or no established quality): nothing to compare against")
    d["label"] = [f"{round(g):+d}" if np.isfinite(g) else "n/l" if not est else ("div" if ok == 0 and nd else "")
                  for g, ok, nd, est in zip(d["gain_pct"], d["n_ok"], d["n_diverged"], d["established"])]
    lim = float(np.nanpercentile(np.abs(d["gain_pct"]), 95)) or 1.0
    rect = alt.Chart().mark_rect().encode(
        x=alt.X("scenario:O"), y=alt.Y("config:N", sort=config_order(d["config"]), title=None),
        color=alt.Color("gain_pct:Q", title="% vs fp32 (> 0 better)",
                        scale=alt.Scale(scheme="redblue", domain=[-lim, lim], domainMid=0, clamp=True)),
        tooltip=["config:N", "scenario:N", "metric:N", alt.Tooltip("gain_pct:Q", format="+.1f")])
    text = alt.Chart().mark_text(fontSize=9).encode(x="scenario:O", y=alt.Y("config:N", sort=config_order(d["config"])),
                                                    text="label:N")
    return alt.layer(rect, text, data=d).properties(width=150).facet(
        column=alt.Column("metric:N", sort=list(HEADLINE), title=None)).properties(
        title="Performance relative to fp32_baseline (% , > 0 = better)")


def flip_chart(stats: pd.DataFrame, flips: list[dict] | None = None) -> alt.Chart:
    """Each config's rank range across scenarios per metric (letters: the scenario at each
    rank); red = the config takes part in a flip beyond seed noise."""
    d = stats.assign(flip=_flip_flag(stats, flips)).dropna(subset=["rank"])[["scenario", "config", "metric",
                                                                             "rank", "flip"]]
    if d.empty:
        return _empty("no ranks")
    color = alt.Color("flip:N", scale=alt.Scale(domain=[True, False], range=["#d62728", "#9e9e9e"]),
                      title="flip beyond noise")
    y = alt.Y("config:N", sort=config_order(d["config"]), title=None)
    rule = alt.Chart().mark_rule(strokeWidth=3, opacity=0.6).encode(y=y, x=alt.X("min(rank):Q", title="rank"),
                                                                     x2="max(rank):Q", color=color)
    text = alt.Chart().mark_text(fontSize=10, fontWeight="bold").encode(y=y, x="rank:Q", text="scenario:N",
                                                                        color=color)
    return alt.layer(rule, text, data=d).properties(width=200).facet(
        column=alt.Column("metric:N", sort=list(HEADLINE), title=None)).properties(
        title="Rank changes across scenarios (red: flip beyond seed noise)")


# ---- output --------------------------------------------------------------------------------
def experiment_charts(summary: pd.DataFrame, curves: pd.DataFrame, divergences: pd.DataFrame) -> dict:
    """Seed 000's per-experiment list, by file name."""
    return {"throughput": throughput_bar(summary), "memory": memory_bar(summary),
            "throughput_vs_quality": quality_scatter(summary), "loss_curves": loss_curves_chart(curves, divergences),
            "pareto": pareto_chart(summary)}


def comparison_charts(stats: pd.DataFrame, flips: list[dict], curves: pd.DataFrame,
                      divergences: pd.DataFrame) -> dict:
    """Seed 000's cross-experiment list, by file name."""
    return {"rank_slope": rank_slope(stats, flips), "relative_heatmap": relative_heatmap(stats),
            "flips": flip_chart(stats, flips), "stability": stability_chart(curves, divergences)}


def _render(spec: dict, fmt: str, scale: float = 1.0) -> bytes:
    """PNG or SVG bytes of a Vega-Lite spec through vl-convert (offline, no browser)."""
    import vl_convert as vlc
    version = "v" + alt.SCHEMA_VERSION.lstrip("v").rsplit(".", 1)[0].replace(".", "_")
    if fmt == "png":
        return vlc.vegalite_to_png(spec, vl_version=version, scale=scale)
    if fmt == "svg":
        return vlc.vegalite_to_svg(spec, vl_version=version).encode()
    raise ValueError(f"chart format {fmt!r}: use png or svg")


def save(chart: alt.TopLevelMixin, stem: str | Path, formats: Iterable[str] = ("png", "svg"),
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
        p.write_bytes(_render(spec, fmt, scale))
        out.append(p)
    return out


@functools.cache
def renderer_available() -> bool:
    """Whether vl-convert (PNG/SVG without a browser) is installed; without it (a bare GPU host,
    say) charts are written as Vega-Lite JSON and notebooks show them interactively only."""
    try:
        import vl_convert  # noqa: F401
        return True
    except ImportError:
        warnings.warn("vl-convert-python is not installed: charts are saved as Vega-Lite JSON (.vl.json), "
                      "not PNG/SVG (pip install vl-convert-python)", stacklevel=3)
        return False


class Shown:
    """A chart for notebook output: the Vega-Lite spec (JupyterLab renders it interactively,
    offline) plus the PNG, which GitHub, nbconvert HTML and viewers without JavaScript show."""

    def __init__(self, chart: alt.TopLevelMixin, png: bytes | None):
        self.chart, self.png = chart, png

    def _repr_mimebundle_(self, include=None, exclude=None):
        spec = {k: v for k, v in self.chart.to_dict(validate=False).items() if k != "$schema"}
        title = spec.get("title", "chart")
        bundle = {"application/vnd.vegalite.v5+json": spec,
                  "text/plain": f"<chart: {title.get('text', title) if isinstance(title, dict) else title}>"}
        if self.png is not None:
            bundle["image/png"] = base64.b64encode(self.png).decode()
        return bundle


def show(chart: alt.TopLevelMixin, png_path: str | Path | None = None) -> Shown:
    """Display object for ``chart``; reuses a PNG written by ``save`` when given."""
    if png_path and Path(png_path).exists():
        png = Path(png_path).read_bytes()
    else:
        png = _render(chart.to_dict(), "png") if renderer_available() else None
    return Shown(chart, png)
