"""Charts: every chart function returns a valid Vega-Lite chart and writes a PNG offline (vl-convert),
also when there is nothing to draw; notebook display carries the spec and a PNG fallback; chart
data stay aggregated and small."""
import base64
import json

import altair as alt
import pandas as pd
import pytest

from benchlib.analysis import tables
from benchlib.analysis import report
from benchlib.analysis import charts
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


def test_svg_is_written_too(study, tmp_path):
    png, svg = charts.save(charts.throughput_bar(study["summary"]), tmp_path / "t")
    assert png.suffix == ".png" and svg.read_text().lstrip().startswith("<svg")


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
