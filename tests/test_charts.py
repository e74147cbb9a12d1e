"""Charts: every chart function returns a valid Vega-Lite chart and writes a PNG offline (vl-convert),
also when there is nothing to draw; notebook display carries the spec and a PNG fallback; chart
data stay aggregated and small."""
import base64
import json
import re

import altair as alt
import numpy as np
import pandas as pd
import pytest
from conftest import line_with

from benchlib.analysis import tables
from benchlib.analysis import report
from benchlib.analysis import charts
from benchlib.analysis import overview
from benchlib.analysis.stats import Rules
from fixtures.records import grid, make_record, write_run, write_study
from test_gates import with_baseline

PNG = b"\x89PNG\r\n\x1a\n"
CFGS = ["fp32_baseline", "amp_bf16", "bf16_pure", "fp16_naive", "fp16_naive_noscale"]


def value(s, c, k):
    v = {"throughput": {"fp32_baseline": 100, "amp_bf16": 200, "bf16_pure": 230}.get(c, 210) + 3 * k,
         "memory": 2.0 if c == "fp32_baseline" else 1.2 + 0.01 * k,
         "quality": (3.0 if s == "A" else 0.5) + 0.01 * k + (0.05 if c == "bf16_pure" else 0)}
    if c == "fp16_naive_noscale" and s == "A":
        v.update(status="diverged", diverged_step=20 + k)
    return v


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    recs = grid("AC", CFGS, seeds=(0, 1), value=value)
    for r in recs:  # steps.jsonl on disk for the curves; the records in memory, with trivial baselines
        r["_path"] = str(write_run(root, r))
    df = tables.study_frame([with_baseline(r) for r in recs])
    comp = report.compare(df, Rules(n_boot=200))
    curves, marks = tables.loss_curves(df[df["scenario"] == "A"])
    return {"summary": tables.summarize(df, "A"), "curves": curves, "marks": marks, "comp": comp}


BUILDERS = {
    "throughput_bar": lambda s: charts.throughput_bar(s["summary"]),
    "memory_bar": lambda s: charts.memory_bar(s["summary"]),
    "quality_scatter": lambda s: charts.quality_scatter(s["summary"]),
    "pareto_chart": lambda s: charts.pareto_chart(s["summary"]),
    "loss_curves_chart": lambda s: charts.loss_curves_chart(s["curves"], s["marks"]),
    "rank_slope": lambda s: charts.rank_slope(s["comp"].stats, s["comp"].result["flips"]),
    "relative_heatmap": lambda s: charts.relative_heatmap(s["comp"].stats),
    "flip_chart": lambda s: charts.flip_chart(s["comp"].stats, s["comp"].result["flips"]),
    "stability_chart": lambda s: charts.stability_chart(s["comp"].curves, s["comp"].divergences),
}


@pytest.mark.parametrize("name", BUILDERS)
def test_every_chart_is_valid_vega_lite_and_writes_a_png(study, tmp_path, name):
    chart = BUILDERS[name](study)
    assert isinstance(chart, alt.TopLevelMixin)
    spec = chart.to_dict()  # validates against the Vega-Lite schema
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
    (png,) = charts.save(chart, tmp_path / name, formats=["png"])
    assert png.read_bytes().startswith(PNG) and png.stat().st_size > 2000


def test_charts_are_written_as_svg_unless_png_is_asked_for(study, tmp_path):
    (svg,) = charts.save(charts.throughput_bar(study["summary"]), tmp_path / "t")  # charts.FORMATS
    assert svg.suffix == ".svg" and svg.read_text().lstrip().startswith("<svg")
    png, svg = charts.save(charts.throughput_bar(study["summary"]), tmp_path / "t", formats=["png", "svg"])
    assert png.read_bytes().startswith(PNG) and svg.stat().st_size < png.stat().st_size
    bundle = charts.show(charts.throughput_bar(study["summary"]), tmp_path / "u.png")._repr_mimebundle_()
    assert "image/png" in bundle  # nothing saved at that path: rendered now
    (only_svg,) = charts.save(charts.throughput_bar(study["summary"]), tmp_path / "v")
    bundle = charts.show(charts.throughput_bar(study["summary"]), tmp_path / "v.png")._repr_mimebundle_()
    assert bundle["image/svg+xml"] == only_svg.read_text() and "image/png" not in bundle  # the saved SVG


def test_the_stability_chart_marks_divergences(study):
    spec = charts.stability_chart(study["comp"].curves, study["comp"].divergences).to_dict()
    rows = next(iter(spec["datasets"].values()))
    assert {(r["config"], r["step"]) for r in rows if r["kind"] == "diverged"} == {("fp16_naive_noscale", 20),
                                                                                  ("fp16_naive_noscale", 21)}


def test_flip_charts_highlight_the_configs_in_flips(study):
    flips = [{"metric": "quality", "config": "bf16_pure"}]
    rows = next(iter(charts.rank_slope(study["comp"].stats, flips).to_dict()["datasets"].values()))
    assert {r["config"] for r in rows if r["flip"]} == {"bf16_pure"}


def test_charts_without_data_say_so_and_still_render(tmp_path):
    root = write_study(tmp_path, [make_record("C", "amp_bf16", 0, status="oom")])
    df = tables.load_study(root)
    summary = tables.summarize(df, "C")
    curves, marks = tables.loss_curves(df)
    stats = tables.config_stats(df)
    for chart in (charts.throughput_bar(summary), charts.quality_scatter(summary), charts.pareto_chart(summary),
                  charts.loss_curves_chart(curves, marks), charts.stability_chart(curves, marks),
                  charts.relative_heatmap(stats), charts.rank_slope(stats), charts.flip_chart(stats)):
        (png,) = charts.save(chart, tmp_path / "empty", formats=["png"])
        assert png.read_bytes().startswith(PNG)
        assert "no " in str(chart.to_dict()["datasets"])


def test_show_gives_jupyterlab_the_spec_and_everyone_else_the_png(study, tmp_path):
    chart = charts.memory_bar(study["summary"])
    (png,) = charts.save(chart, tmp_path / "m", formats=["png"])
    bundle = charts.show(chart, png)._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"]) == png.read_bytes()
    assert "$schema" not in bundle["application/vnd.vegalite.v5+json"]  # rendered by JupyterLab's Vega-Lite 5
    assert bundle["text/plain"].startswith("<chart: Peak memory")


def test_a_static_only_chart_is_an_svg_without_the_data():
    """A run's curves in its executed notebook: one SVG, no Vega-Lite spec (it would copy the
    run's steps into the notebook) and no PNG (three times the SVG of a line chart)."""
    frame = pd.DataFrame({"step": range(500), "loss": [5 - k / 200 for k in range(500)]})
    chart = alt.Chart(frame).mark_line().encode(x="step", y="loss").properties(title="run A/x/seed0")
    bundle = charts.show(chart, static="svg", interactive=False)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "image/svg+xml"} and bundle["image/svg+xml"].lstrip().startswith("<svg")
    assert bundle["text/plain"] == "<chart: run A/x/seed0>"
    both = charts.show(chart)._repr_mimebundle_()
    assert len(bundle["image/svg+xml"]) < len(both["image/png"]) and "application/vnd.vegalite.v5+json" in both


def test_in_a_sweep_every_notebooks_charts_are_static_and_by_hand_interactive(monkeypatch):
    """The sweep sets STATIC_CHARTS_ENV for the analysis notebooks too: their charts keep the image,
    not a second copy of the data in the spec; a notebook run by hand keeps the interactive chart."""
    chart = alt.Chart(pd.DataFrame({"x": [1, 2], "y": [3, 4]})).mark_point().encode(x="x", y="y")
    monkeypatch.setenv(charts.STATIC_CHARTS_ENV, "1")
    assert "application/vnd.vegalite.v5+json" not in charts.show(chart, static="svg")._repr_mimebundle_()
    assert "application/vnd.vegalite.v5+json" in charts.show(chart, interactive=True)._repr_mimebundle_()
    monkeypatch.delenv(charts.STATIC_CHARTS_ENV)
    assert "application/vnd.vegalite.v5+json" in charts.show(chart, static="svg")._repr_mimebundle_()


def test_chart_data_stay_aggregated_for_long_runs(tmp_path):
    for k in range(3):
        write_run(tmp_path, make_record("A", "amp_bf16", k, steps=20000))
    curves, marks = tables.loss_curves(tables.load_study(tmp_path))
    spec = charts.loss_curves_chart(curves, marks).to_dict()
    assert sum(len(rows) for rows in spec["datasets"].values()) <= 120  # 60k steps -> one row per bin


def test_without_vl_convert_charts_are_saved_as_vega_lite_json_and_shown_interactive_only(tmp_path, monkeypatch):
    import sys

    from benchlib.analysis import charts as ch
    monkeypatch.setitem(sys.modules, "vl_convert", None)  # as on a GPU host without the wheel
    ch.renderer_available.cache_clear()
    try:
        chart = alt.Chart(pd.DataFrame({"x": [1, 2], "y": [3, 4]})).mark_line().encode(x="x", y="y")
        with pytest.warns(UserWarning, match="vl-convert-python is not installed"):
            files = ch.save(chart, tmp_path / "c", ("png", "svg"))
        assert [f.name for f in files] == ["c.vl.json"]
        assert json.loads(files[0].read_text())["mark"]["type"] == "line"
        bundle = ch.show(chart)._repr_mimebundle_()
        assert "image/png" not in bundle and "application/vnd.vegalite.v5+json" in bundle
    finally:
        ch.renderer_available.cache_clear()


# ---- what each chart must show at a glance ---------------------------------------------------
def units(node):
    """Every single-view spec (one with a mark) inside a chart's spec, in order."""
    if isinstance(node, dict):
        if "mark" in node:
            yield node
        for v in node.values():
            yield from units(v)
    elif isinstance(node, list):
        for v in node:
            yield from units(v)


def rows_of(spec, column):
    """The chart's data rows that carry ``column``."""
    return [r for rows in spec["datasets"].values() for r in rows if column in r]


def mark_type(u):
    return u["mark"]["type"] if isinstance(u["mark"], dict) else u["mark"]


def curves_frame(scenario, start, end, configs=("fp32_baseline", "fp16_naive"), n_runs=1):
    steps = list(range(0, 300, 10))
    return pd.DataFrame([{"scenario": scenario, "config": c, "step": s, "loss": start * (end / start) ** (s / 290),
                          "loss_lo": start * (end / start) ** (s / 290), "loss_hi": start * (end / start) ** (s / 290),
                          "n_runs": n_runs, "cap": 3 * start} for c in configs for s in steps])


NO_DIVERGENCE = pd.DataFrame(columns=["scenario", "config", "seed", "step", "loss"])


def test_the_stability_chart_gives_each_scenario_its_own_log_scaled_loss_axis():
    curves = pd.concat([curves_frame("A", 11.0, 3.0), curves_frame("D", 0.74, 0.008)], ignore_index=True)
    spec = charts.stability_chart(curves, NO_DIVERGENCE).to_dict()
    assert spec["resolve"]["scale"]["y"] == "independent"  # D's 0.74 -> 0.008 is not a flat line under A's 11
    line = next(u for u in units(spec) if mark_type(u) == "line")
    assert line["encoding"]["y"]["scale"]["type"] == "log"
    assert min(r["loss"] for r in rows_of(spec, "loss") if r["scenario"] == "D") == pytest.approx(0.008)


def test_loss_curves_per_config_are_on_a_log_scale():
    spec = charts.loss_curves_chart(curves_frame("D", 0.74, 0.008), NO_DIVERGENCE).to_dict()
    assert {u["encoding"]["y"]["scale"]["type"] for u in units(spec) if "y" in u["encoding"]} == {"log"}


def outlier_summary(n_seeds=1):
    """A: four healthy configs at val loss 3.00-3.03, and fp16_naive_noscale that never learned
    (val loss 9.4, did not beat the trivial predictor)."""
    speed = {"fp32_baseline": 100, "amp_bf16": 200, "bf16_pure": 230, "amp_fp16": 190, "fp16_naive_noscale": 260}
    recs = []
    for c, t in speed.items():
        for k in range(n_seeds):
            q = 9.4 if c == "fp16_naive_noscale" else 3.0 + 0.01 * list(speed).index(c) + 0.002 * k
            recs.append(with_baseline(make_record("A", c, k, throughput=t + k, quality=q),
                                      beats=c != "fp16_naive_noscale"))
    return tables.summarize(tables.study_frame(recs), "A")


def test_a_run_that_never_learned_stays_off_the_frontier_and_out_of_the_axis():
    spec = charts.quality_scatter(outlier_summary()).to_dict()
    rows = {r["config"]: r for r in rows_of(spec, "point")}
    bad = rows["fp16_naive_noscale"]
    assert bad["point"] == "excluded (failed run)" and not bad["frontier"] and not bad["shown"]
    (pts,) = [u for u in units(spec) if u.get("encoding", {}).get("y", {}).get("field") == "quality"
              and mark_type(u) == "point" and "shape" in u["encoding"] and "color" in u["encoding"]]
    lo, hi = pts["encoding"]["y"]["scale"]["domain"]
    assert lo < 3.0 and 3.03 < hi < 3.1  # the healthy configs' range, not stretched to 9.4
    assert any("fp16_naive_noscale" in s and "stalled" in s for s in spec["title"]["subtitle"])


def test_a_failed_config_inside_the_range_is_drawn_grey_and_hollow_and_named_in_the_legend():
    summary = outlier_summary()
    summary.loc[summary["config"] == "fp16_naive_noscale", "quality"] = 3.02  # inside the healthy range
    spec = charts.quality_scatter(summary).to_dict()
    assert {r["config"]: r["shown"] for r in rows_of(spec, "point")}["fp16_naive_noscale"]
    failed = [u for u in units(spec) if u.get("transform") == [{"filter": "datum.shown"}, {"filter": "datum.excluded"}]]
    (layer,) = [u for u in failed if mark_type(u) == "point"]
    assert layer["mark"]["color"] == charts.FAILED_GREY and layer["mark"]["filled"] is False
    assert "excluded (failed run)" in layer["encoding"]["shape"]["scale"]["domain"]


def label_boxes(spec):
    """Pixel boxes of the frontier chart's config labels, from its data and its axis domains."""
    (text,) = [u for u in units(spec) if mark_type(u) == "text" and u["encoding"].get("x", {}).get("field") == "lx"]
    (pts,) = [u for u in units(spec) if "shape" in u.get("encoding", {}) and "color" in u["encoding"]]
    (x0, x1), (y0, y1) = pts["encoding"]["x"]["scale"]["domain"], pts["encoding"]["y"]["scale"]["domain"]
    w, h = spec["width"], spec["height"]
    out = []
    for r in rows_of(spec, "label"):
        if r["shown"]:
            left, mid = (r["lx"] - x0) / (x1 - x0) * w, (y1 - r["ly"]) / (y1 - y0) * h
            out.append((left, mid - 5, left + 5 * len(r["label"]), mid + 5))  # 10 px text, >= 5 px a character
    return out


def test_config_labels_never_overlap_even_where_points_crowd():
    configs = ["fp32_baseline", "fp32_tf32_matmul", "amp_fp16", "amp_bf16", "bf16_pure", "bf16_naive",
               "amp_fp16_8bit_adam", "amp_bf16_8bit_adam"]
    recs = [with_baseline(make_record("A", c, 0, throughput=400 + i, quality=3.0 + 0.001 * i))
            for i, c in enumerate(configs)]  # eight points within a few pixels of each other
    spec = charts.quality_scatter(tables.summarize(tables.study_frame(recs), "A")).to_dict()
    boxes = label_boxes(spec)
    assert len(boxes) == len(configs)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)


def test_the_recommended_config_is_ringed_and_labelled():
    spec = charts.quality_scatter(outlier_summary(), recommended="amp_bf16").to_dict()
    rows = rows_of(spec, "recommended")
    assert {r["config"] for r in rows if r["recommended"]} == {"amp_bf16"}
    assert {r["label"] for r in rows if r["recommended"]} == {"amp_bf16 (recommended)"}
    assert any(u.get("transform", [])[-1:] == [{"filter": "datum.recommended"}] for u in units(spec))


def test_error_bars_are_drawn_where_two_seeds_ran_and_the_chart_says_when_none_are():
    two = charts.quality_scatter(outlier_summary(n_seeds=2)).to_dict()
    assert sum(mark_type(u) == "errorbar" for u in units(two)) == 2  # throughput and quality
    assert all(r["qhi"] > r["qlo"] for r in rows_of(two, "qlo") if r["shown"])
    one = charts.quality_scatter(outlier_summary(n_seeds=1)).to_dict()
    assert not any(mark_type(u) == "errorbar" for u in units(one))
    assert "one seed per config: no error bars" in one["title"]["subtitle"]
    bars = charts.throughput_bar(outlier_summary(n_seeds=2)).to_dict()
    err = next(u for u in units(bars) if mark_type(u) == "errorbar")
    assert err["transform"] == [{"filter": "datum.n_seeds >= 2"}]


def test_loss_bands_over_seeds_are_drawn_only_where_two_seeds_ran():
    spec = charts.loss_curves_chart(curves_frame("A", 11.0, 3.0, n_runs=3), NO_DIVERGENCE).to_dict()
    band = next(u for u in units(spec) if mark_type(u) == "area")
    assert "datum.n_runs >= 2" in band["transform"][0]["filter"]
    assert "subtitle" not in spec["title"]
    one = charts.loss_curves_chart(curves_frame("A", 11.0, 3.0, n_runs=1), NO_DIVERGENCE).to_dict()
    assert one["title"]["subtitle"] == "one seed per config: no band"


def test_an_lm_curve_past_one_pass_over_its_corpus_marks_that_step():
    past = curves_frame("A", 11.0, 3.0, n_runs=3).assign(one_pass=4)
    spec = charts.loss_curves_chart(past, NO_DIVERGENCE).to_dict()
    rules = [u for u in units(spec) if mark_type(u) == "rule"]
    assert len(rules) == 1 and rules[0]["encoding"]["x"]["field"] == "one_pass"
    assert "one pass over the training corpus read by step 4" in spec["title"]["subtitle"]
    never = charts.loss_curves_chart(curves_frame("A", 11.0, 3.0, n_runs=3).assign(one_pass=np.nan), NO_DIVERGENCE)
    assert not [u for u in units(never.to_dict()) if mark_type(u) == "rule"]


def heat_stats():
    """Gains vs fp32 as seed 000's H200 study had them: +827% throughput, -4% and -17% quality;
    quality on D not established."""
    rows = []
    for s in "AD":
        for c, t, q in (("fp32_baseline", 0.0, 0.0), ("bf16_naive", 794.0, -4.0), ("fp16_naive", 827.0, -17.0)):
            for m, g in (("throughput", t), ("memory", 40.0 if c != "fp32_baseline" else 0.0), ("quality", q)):
                est = not (m == "quality" and s == "D")
                rows.append({"scenario": s, "config": c, "metric": m, "mean": 1.0 if est else np.nan,
                             "gain_pct": g if est else np.nan, "n_ok": 1, "n_diverged": 0, "established": est,
                             "rank": 1.0})
    return pd.DataFrame(rows)


def test_the_heatmap_has_a_diverging_colour_scale_per_metric_centred_at_zero():
    spec = charts.relative_heatmap(heat_stats()).to_dict()
    assert spec["resolve"]["scale"]["color"] == "independent"
    scales = {u["encoding"]["color"]["title"]: u["encoding"]["color"]["scale"] for u in units(spec)
              if "color" in u.get("encoding", {}) and "field" in u["encoding"]["color"]}
    assert scales["quality: % vs fp32"]["domain"] == [-17.0, 17.0]  # not washed out by +827
    assert scales["throughput: % vs fp32"]["domain"] == [-827.0, 827.0]
    assert all(s["domainMid"] == 0 and s["scheme"] == "redblue" for s in scales.values())


def test_a_heatmap_column_without_data_says_why_instead_of_staying_blank():
    spec = charts.relative_heatmap(heat_stats(), notes={"D": "reference fp32_baseline: not learned; more"}).to_dict()
    marks = [r for r in rows_of(spec, "text") if str(r["text"]).startswith("no data")]
    assert [(r["scenario"], r["text"]) for r in marks] == [("D", "no data: quality not established")]
    assert any("quality on D" in line and "not learned" in line for line in spec["title"]["subtitle"])


def tied_stats():
    """Quality ranks on C: three configs tied at the best value; on A all distinct."""
    rows = []
    for s, ranks in (("A", [1, 2, 3, 4]), ("C", [1, 1, 1, 4])):
        for c, r in zip(CFGS[:4], ranks):
            rows.append({"scenario": s, "config": c, "metric": "quality", "rank": float(r), "mean": 1.0 / r})
    return pd.DataFrame(rows)


def test_tied_ranks_are_drawn_as_ties_not_as_one_point():
    spec = charts.rank_slope(tied_stats()).to_dict()
    c = [r for r in rows_of(spec, "n_tied") if r["scenario"] == "C"]
    tied = [r for r in c if r["rank"] == 1]
    assert len(tied) == 3 and {r["n_tied"] for r in tied} == {3}
    assert len({r["y"] for r in tied}) == 3 and all(abs(r["y"] - 1) < 0.5 for r in tied)  # side by side at 1
    assert {r["tie"] for r in tied} == {"= 3 tied"}
    label = next(u for u in units(spec) if mark_type(u) == "text")
    assert label["encoding"]["text"]["field"] == "tie" and label["transform"][0] == {"filter": "datum.n_tied > 1"}


def test_scenario_letters_at_one_rank_print_on_separate_lines():
    stats = pd.DataFrame([{"scenario": s, "config": "amp_bf16", "metric": "quality", "rank": 2.0} for s in "ACE"])
    spec = charts.flip_chart(stats).to_dict()
    letters = [u for u in units(spec) if mark_type(u) == "text"]
    offsets = [u["mark"]["dy"] for u in letters]
    assert len(letters) == 3 and len(set(offsets)) == 3
    assert min(b - a for a, b in zip(offsets, offsets[1:])) >= 10  # a 10 px letter apart


def chart_title(spec):
    t = spec.get("title")
    return t.get("text") if isinstance(t, dict) else t


EMPTY = {
    "metric_bar": lambda s, c, st: charts.metric_bar(s, "memory"),
    "quality_scatter": lambda s, c, st: charts.quality_scatter(s),
    "pareto_chart": lambda s, c, st: charts.pareto_chart(s),
    "loss_curves_chart": lambda s, c, st: charts.loss_curves_chart(*c),
    "stability_chart": lambda s, c, st: charts.stability_chart(*c),
    "rank_slope": lambda s, c, st: charts.rank_slope(st),
    "relative_heatmap": lambda s, c, st: charts.relative_heatmap(st),
    "flip_chart": lambda s, c, st: charts.flip_chart(st),
}


@pytest.mark.parametrize("name", BUILDERS)
def test_every_chart_has_a_title(study, name):
    assert chart_title(BUILDERS[name](study).to_dict()).strip()


@pytest.mark.parametrize("name", EMPTY)
def test_every_chart_without_data_has_a_title_too(tmp_path, name):
    df = tables.load_study(write_study(tmp_path, [make_record("C", "amp_bf16", 0, status="oom")]))
    chart = EMPTY[name](tables.summarize(df, "C"), tables.loss_curves(df), tables.config_stats(df))
    assert chart_title(chart.to_dict()).strip()


# ---- the overview ------------------------------------------------------------------------------
def overview_inputs():
    df = overview_frame()
    return {s: tables.summarize(df, s) for s in "AC"}, tables.config_stats(df)


def overview_frame(shared: bool = False):
    """A and C, three seeds: fp16_naive diverges once on A; bf16_pure degrades on C (quality 20%
    below fp32 on every seed); fp16_naive_noscale never beats the trivial predictor on C."""
    def value(s, c, k):
        v = ok = {"throughput": {"fp32_baseline": 100, "amp_bf16": 200}.get(c, 220) + k,
                   "quality": (3.0 if s == "A" else 0.5) + 0.001 * k}
        if s == "A" and c == "fp16_naive" and k == 0:
            v = {**ok, "status": "diverged", "diverged_step": 40}
        if s == "C" and c == "bf16_pure":
            v = {**ok, "quality": 0.4}
        return v
    recs = [with_baseline(r, beats=not (r["scenario"] == "C" and r["config"] == "fp16_naive_noscale"))
            for r in grid("AC", CFGS, value=value)]
    return tables.study_frame([{**r, "sweep": {"runs_per_gpu": 12}} for r in recs] if shared else recs)


def test_the_overview_is_three_titled_charts():
    summaries, stats = overview_inputs()
    ov = overview.overview_charts(summaries, stats, [], recommended={"A": "amp_bf16"})
    assert list(ov) == ["quality_vs_throughput", "where_configs_break", "flips"]
    assert all(chart_title(c.to_dict()).strip() for c in ov.values())


def test_the_overview_grid_shows_where_each_config_breaks():
    from benchlib.analysis.recommend import safety
    summaries, stats = overview_inputs()
    verdicts = safety(overview_frame(), Rules(n_boot=200))
    spec = overview.overview_charts(summaries, stats, [], verdicts=verdicts)["where_configs_break"].to_dict()
    cells = {(r["scenario"], r["config"]): (r["status"], r["label"]) for r in rows_of(spec, "status")}
    assert cells["A", "fp16_naive"] == ("failed(diverged)", "2/3")
    assert cells["C", "bf16_pure"] == ("degraded", "0/3")
    assert cells["C", "fp16_naive_noscale"] == ("failed(stalled)", "0/3")
    assert cells["A", "amp_bf16"][1] == "3/3" and cells["A", "amp_bf16"][0] in ("safe", "inconclusive")
    assert cells["A", "fp32_baseline"][0] == "reference"
    # without a comparison there is no verdict to draw, and the chart says so rather than guess from run health
    assert "no verdicts" in json.dumps(overview.status_grid(summaries, None).to_dict())


def test_the_overview_rings_each_scenarios_recommended_config():
    summaries, stats = overview_inputs()
    spec = overview.overview_charts(summaries, stats, [], recommended={"A": "amp_bf16"})[
        "quality_vs_throughput"].to_dict()
    panels = spec["concat"]
    assert [p["title"]["text"] for p in panels] == ["A: val loss vs throughput", "C: micro-F1 vs throughput"]
    assert {r["config"] for r in rows_of(spec, "recommended") if r["recommended"]} == {"amp_bf16"}
    assert "no config recommended" in panels[1]["title"]["subtitle"]


def test_throughput_of_runs_that_shared_a_gpu_is_not_measured_and_the_heatmap_says_so_once():
    st = heat_stats()
    st.loc[st["metric"] == "throughput", ["mean", "gain_pct"]] = np.nan  # blanked: runs side by side
    note = "reference fp32_baseline: learned; 3 of 3 run(s) shared their GPU with other runs (--runs_per_gpu)"
    spec = charts.relative_heatmap(st, notes={"A": note, "D": note}).to_dict()
    sub = spec["title"]["subtitle"]
    said = [line for line in sub if line.startswith("throughput")]
    assert said == ["throughput on A, D: no data, speed not measured: the runs shared a GPU (--runs_per_gpu)"]
    assert not any("learned" in line for line in said)  # the gate's note belongs to quality
    assert "speed not measured: the runs shared a GPU" in json.dumps(spec)  # the throughput panel too


def test_a_heatmap_panel_goes_symmetric_log_only_where_a_few_cells_dwarf_the_rest():
    def stats(quality):
        return pd.DataFrame([{"scenario": "A", "config": c, "metric": m, "mean": 1.0, "n_ok": 3, "n_diverged": 0,
                              "established": True, "rank": 1.0,
                              "gain_pct": g if m == "quality" else 10.0 + 5 * k if c != "fp32_baseline" else 0.0}
                             for k, (c, g) in enumerate(zip(CFGS, quality)) for m in ("memory", "quality")])
    scale = lambda spec, title: next(u["encoding"]["color"]["scale"] for u in units(spec)  # noqa: E731
                                     if u.get("encoding", {}).get("color", {}).get("title") == title)
    spec = charts.relative_heatmap(stats([0.0, -1.0, -0.5, -2.0, -4.0])).to_dict()
    assert scale(spec, "quality: % vs fp32")["type"] == "linear"
    # a failure at -100% beside gaps of 0.5-2%: on a linear scale those would all read white
    spec = charts.relative_heatmap(stats([0.0, -1.0, -0.5, -2.0, -100.0])).to_dict()
    assert scale(spec, "quality: % vs fp32")["type"] == "symlog"
    assert scale(spec, "memory: % vs fp32")["type"] == "linear"


def test_an_overview_of_runs_that_shared_a_gpu_shows_quality_per_config_not_an_empty_frontier():
    def value(s, c, k):
        v = {"throughput": 100 + k, "quality": (3.0 if s == "A" else 0.5) + 0.001 * k}
        return {**v, "quality": 0.4} if s == "C" and c == "bf16_pure" else v
    recs = [{**with_baseline(r), "sweep": {"runs_per_gpu": 12}} for r in grid("AC", CFGS, value=value)]
    df = tables.study_frame(recs)
    summaries = {s: tables.summarize(df, s) for s in "AC"}
    assert all(charts.speed_unmeasured(s) for s in summaries.values())
    spec = overview.quality_throughput_panels(summaries, {"A": "amp_bf16"}).to_dict()
    assert [p["title"]["text"] for p in spec["concat"]] == ["A: val loss per config", "C: micro-F1 per config"]
    assert all(charts.NO_SPEED in p["title"]["subtitle"] for p in spec["concat"])
    assert "no ok runs" not in json.dumps(spec) and chart_title(spec).startswith("Quality per config and scenario")
    # bf16_pure's degraded runs on C lie below the healthy configs' range: red, at the axis edge
    c = [r for r in rows_of(spec, "shape") if r["config"] == "bf16_pure" and r["quality"] == 0.4]
    assert len(c) == 3 and all(r["failed"] and r["shape"] == "triangle-left" for r in c)
    assert {r["shape"] for r in rows_of(spec, "shape") if not r["failed"]} == {"circle"}
    # a study with speed keeps its throughput-quality frontier
    timed = {s: tables.summarize(tables.study_frame([with_baseline(r) for r in grid("AC", CFGS, value=value)]), s)
             for s in "AC"}
    assert not any(charts.speed_unmeasured(s) for s in timed.values())


def test_a_speed_study_draws_throughput_against_memory_not_quality():
    """A speed study's scenario (judge_quality false): the scatter and the frontier chart set
    throughput against peak memory; the frontier is the healthy configs none is both faster
    and leaner than; a diverged config is a grey cross, never on it."""
    from test_gates import failing_study
    df = failing_study()
    df["run.judge_quality"] = False
    for c, mem in {"fp32_baseline": 4.0, "amp_bf16": 3.0, "bf16_pure": 2.0, "fp16_naive": 3.5, "bf16_naive": 2.5,
                   "fp16_naive_noscale": 1.0}.items():
        df.loc[df["config"] == c, "memory"] = mem
    summary = tables.summarize(tables.apply_gates(df), "A")
    assert charts.speed_only(summary)
    for chart in (charts.quality_scatter(summary), charts.pareto_chart(summary)):
        spec = chart.to_dict()
        rows = [r for rows in spec["datasets"].values() for r in rows if "point" in r]
        assert "memory" in json.dumps(spec["layer"][0]["encoding"]["y"]) and "quality" not in rows[0]
        points = {r["config"]: r["point"] for r in rows}
        # bf16_naive (350/s, 2.5 GiB) and bf16_pure (250/s, 2.0 GiB) trade speed for memory;
        # fp16_naive (300/s, 3.5) is slower and heavier than bf16_naive; fp32 and amp_bf16 dominated
        assert {c for c, p in points.items() if p == "frontier"} == {"bf16_naive", "bf16_pure"}
        assert points["amp_bf16"] == "dominated" and points["fp16_naive"] == "dominated"
        assert "fp16_naive_noscale" not in points or points["fp16_naive_noscale"] == "excluded (failed run)"


# ---- one status vocabulary ---------------------------------------------------------------------
def _verdict_rows(spec: dict) -> list[dict]:
    return [r for rows in spec.get("datasets", {}).values() for r in rows if r.get("verdict") is not None]


@pytest.mark.parametrize("shared", [False, True], ids=["timed", "shared GPU"])
def test_every_charts_verdict_is_the_comparisons(shared):
    """Each chart that draws a verdict (the grid, the quality strip, the frontier panels, the
    speed-memory panel) carries in its data the comparison's own verdict and mark for that
    (scenario, config), as the Findings print it; an unsafe config is never drawn grey, and no
    config that is not safe on a scenario sits on its frontier."""
    from benchlib.analysis.answer import mark
    df = overview_frame(shared)  # shared: no speed, the quality strip instead of a frontier
    comp = report.compare(df, Rules(n_boot=200))
    saf = comp.safety
    truth = {(r.scenario, r.config): (r.verdict, mark(r.verdict, str(r.reason or ""))) for r in saf.itertuples()}
    assert {"failed", "degraded"} <= {v for v, _ in truth.values()}
    checked = 0
    for s in "AC":
        summary = charts.with_verdicts(tables.summarize(df, s), saf[saf["scenario"] == s])
        drawn = [charts.quality_scatter(summary), charts.pareto_chart(summary),
                 charts.speed_memory_panel(summary.assign(note="not judged"), "t")]
        drawn += list(overview.overview_charts({s: tables.summarize(df, s)}, comp.stats, [], verdicts=saf).values())
        for chart in drawn:
            spec = chart.to_dict()
            for r in _verdict_rows(spec):
                verdict, marked = truth[(r.get("scenario", s), r["config"])]
                assert r["verdict"] == verdict and r.get("mark", r.get("status")) == marked, (s, r["config"])
                if verdict not in tables.SAFE:
                    assert r.get("point") != "frontier" and not r.get("frontier"), (s, r["config"])
                checked += 1
            for colour in ("color", "fill", "stroke"):  # where a verdict picks the colour, an unsafe one is never grey
                for enc in [u.get("encoding", {}).get(colour, {}) for u in units(spec)]:
                    sc = enc.get("scale", {})
                    for m, c in zip(sc.get("domain", []), sc.get("range", [])):
                        if str(m).split("(")[0] in ("failed", "degraded"):
                            assert c == overview.VERDICT[str(m).split("(")[0]]
    assert checked > 20


# ---- what notebook 10 says ---------------------------------------------------------------------
def test_runs_that_shared_their_gpu_are_said_unmeasured_not_failed():
    """Every run ok, all on a shared GPU: the speed charts and the sentences say the speed was not
    measured because the GPU was shared, never that no run was ok."""
    recs = [{**with_baseline(r), "sweep": {"runs_per_gpu": 12}}
            for r in grid("A", CFGS[:3], value=lambda s, c, k: {"quality": 3.0 + 0.001 * k})]
    summary = tables.summarize(tables.study_frame(recs), "A")
    assert (summary.loc[summary["seed"] != "mean", "status"] == "ok").all()
    for chart in (charts.throughput_bar(summary), charts.pareto_chart(summary)):
        text = json.dumps(chart.to_dict())
        assert charts.NO_SPEED in text and "no ok runs" not in text and "no run finished" not in text
    said = tables.describe_experiment(summary, "A")
    fastest = line_with(said, "fastest")
    assert "none" in fastest and "shared" in fastest and not any(c in fastest for c in CFGS)  # no arm named, and why
    # the same charts of runs that did not finish say that instead
    failed = tables.summarize(tables.study_frame([make_record("A", c, k, status="oom") for c in CFGS[:2]
                                                  for k in (0, 1)]), "A")
    assert "no run finished" in json.dumps(charts.throughput_bar(failed).to_dict())


def test_the_best_quality_sentence_counts_the_best_configs_own_seeds():
    """amp_bf16 is best over seven seeds; bf16_pure ran one: the sentence gives amp_bf16 its seven
    and names bf16_pure as the config with too few seeds, not "one seed" for the best."""
    def value(s, c, k):
        return {"quality": {"fp32_baseline": 3.0, "amp_bf16": 2.9, "bf16_pure": 2.95}[c] + 0.001 * k}
    recs = [with_baseline(r) for r in grid("A", ["fp32_baseline", "amp_bf16"], seeds=range(7), value=value)
            + grid("A", ["bf16_pure"], seeds=(0,), value=value)]
    said = tables.describe_experiment(tables.summarize(tables.study_frame(recs), "A"), "A")
    best = next(ln for ln in said.splitlines() if ln.startswith("- best quality: "))
    assert best.startswith("- best quality: amp_bf16 (7 seeds;")
    assert best.endswith("too few seeds to tell whether these are within seed noise of it "
                         f"(needs >= {Rules().min_seeds}): bf16_pure (one seed).")


def test_svg_geometry_is_kept_to_a_tenth_of_a_pixel_and_text_untouched():
    import xml.etree.ElementTree as ET
    from benchlib.analysis.charts import compact_svg
    svg = ('<svg xmlns="http://www.w3.org/2000/svg"><g transform="translate(10.2571,3.5)">'
           '<path d="M12.3456,-7.891L3,4.55Z"/><text x="10.126" y="2">0.00251</text></g></svg>')
    out = compact_svg(svg)
    root = ET.fromstring(out)  # still well-formed
    ns = "{http://www.w3.org/2000/svg}"
    assert root.find(f"{ns}g").get("transform") == "translate(10.2,3.5)"
    assert root.find(f"{ns}g/{ns}path").get("d") == "M12.3,-7.8L3,4.5Z"
    text = root.find(f"{ns}g/{ns}text")
    assert text.text == "0.00251" and text.get("x") == "10.1"


def test_a_lean_svg_draws_the_same_pixels_in_a_third_of_the_bytes():
    """``lean_svg`` drops what draws nothing and what a group's children share: the chart's pixels
    stay (vl-convert rasterises both), the bytes shrink, and leaning twice changes nothing."""
    import vl_convert as vlc
    from benchlib.analysis.charts import lean_svg
    frame = pd.DataFrame({"step": list(range(40)) * 2, "loss": [1 / (1 + i) for i in range(80)],
                          "config": ["a"] * 40 + ["b"] * 40})
    chart = alt.Chart(frame).mark_line().encode(x="step:Q", y=alt.Y("loss:Q", scale=alt.Scale(type="log")),
                                                color="config:N").properties(title="curves")
    version = "v" + alt.SCHEMA_VERSION.lstrip("v").rsplit(".", 1)[0].replace(".", "_")
    raw = charts.compact_svg(vlc.vegalite_to_svg(chart.to_dict(), vl_version=version))  # as render draws it
    lean = lean_svg(raw)
    assert vlc.svg_to_png(lean) == vlc.svg_to_png(raw)
    assert len(lean) < 0.4 * len(raw)
    assert "aria-" not in lean and ' role="' not in lean and 'stroke-width="1"' not in lean
    assert lean.count("<line") < raw.count("<line") / 4  # an axis's ticks and grid: a path each
    assert re.search(r'd="M[\d.]+,[\d.]+l', lean)  # a curve's points after the first: relative
    assert lean_svg(lean) == lean
