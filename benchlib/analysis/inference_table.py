"""``dtype-bench infer-table``: the records of ``dtype-bench infer`` as one table and one chart.

    dtype-bench infer-table executed/h100/inference_2026-11-24 [--out DIR]

Every ``inference.json`` under the folders given is one model (a scenario, its weights) served
in several inference precisions (modes). Per (record, mode): status, forward ms and
throughput, the speed-up over the record's ``fp32`` mode (its forward ms / the mode's), peak
memory, validation quality and its difference to the ``fp32`` mode, and for GPT-2 causal LM
the prefill and per-token decode latencies. The quality of weights that were never trained says
nothing about serving a model: such a record is marked ``untrained``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import altair as alt
import pandas as pd

from benchlib.analysis.charts import chart_title, no_data_chart
from benchlib.analysis.outputs import write_outputs
from benchlib.analysis.scaling import markdown_table
from benchlib.analysis.serving import QUALITY  # the quality column per task, as serve-table reads it
from benchlib.core.records import describe_environment
from benchlib.core.scenarios import get_scenario

REFERENCE_MODE = "fp32"
UNTRAINED = "initialised (from scratch)"
TABLE_COLUMNS = ["scenario", "weights", "mode", "status", "forward_ms", "forward_stat", "forward_ms_std", "throughput",
                 "throughput_unit", "speedup_vs_fp32", "peak_gib", "quality_metric", "quality",
                 "quality_minus_fp32", "prefill_ms", "decode_ms_per_token", "decode_ms_per_token_p90", "reason"]


def load(paths: list[str | Path]) -> list[dict]:
    """Every inference record under ``paths`` (files or folders), with its path."""
    found = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"no such file or folder {str(p)!r}")
        found += [p] if p.is_file() else sorted(p.rglob("inference.json"))
    records = []
    for f in found:
        rec = json.loads(f.read_text())
        if rec.get("kind") != "inference":
            raise ValueError(f"{f}: not a record of dtype-bench infer (kind {rec.get('kind')!r})")
        records.append({**rec, "_path": str(f)})
    if not records:
        raise FileNotFoundError(f"no inference.json under {', '.join(map(str, paths))}")
    return records


def _task(rec: dict) -> str:
    return get_scenario(rec["run"]["scenario"]).task


def table(records: list[dict]) -> pd.DataFrame:
    """One row per (record, mode), the record's modes in the order it ran them."""
    rows = []
    for i, rec in enumerate(records):
        key = QUALITY[_task(rec)]
        weights = "untrained" if rec.get("weights") == UNTRAINED else "/".join(Path(str(rec.get("weights"))).parts[-2:])
        modes = rec["modes"]
        ref = next((m for m in modes if m["mode"] == REFERENCE_MODE and m.get("status") == "ok"), None)
        for m in modes:
            ok = m.get("status") == "ok"
            q = m.get(f"quality/{key}") if ok else None
            qref = ref.get(f"quality/{key}") if ref else None
            rows.append({
                "record": i, "scenario": rec["run"]["scenario"], "weights": weights, "mode": m["mode"],
                "status": m.get("status"), "reason": m.get("reason") or "",
                "forward_ms": m.get("forward_ms"), "forward_ms_std": m.get("forward_ms_std"),
                # records before the median was taken hold the mean of the timed passes
                "forward_stat": m.get("forward_stat", "mean") if m.get("forward_ms") is not None else "",
                "throughput": m.get("throughput"), "throughput_unit": m.get("throughput_unit"),
                "speedup_vs_fp32": ref["forward_ms"] / m["forward_ms"] if ok and ref else math.nan,
                "peak_gib": m.get("memory/peak_gib"), "quality_metric": key, "quality": q,
                "quality_minus_fp32": q - qref if q is not None and qref is not None else math.nan,
                "prefill_ms": m.get("prefill_ms"), "decode_ms_per_token": m.get("decode_ms_per_token"),
                "decode_ms_per_token_p90": m.get("decode_ms_per_token_p90")})
    return pd.DataFrame(rows).astype({c: float for c in ("forward_ms", "forward_ms_std", "throughput", "peak_gib",
                                                          "quality", "prefill_ms", "decode_ms_per_token",
                                                          "decode_ms_per_token_p90")})


def chart(t: pd.DataFrame, environment: str = "") -> alt.Chart:
    """Forward speed-up over fp32 per mode, one panel per scenario; decode latency beside it
    where a causal LM was decoded."""
    title = "Serving in each precision: forward speed-up over fp32 weights"
    d = t[t["speedup_vs_fp32"].notna()].copy()
    if d.empty:
        return no_data_chart("no mode with a forward time next to an fp32 one", title)
    d["panel"] = d["scenario"] + " (" + d["weights"] + ")"
    order = list(dict.fromkeys(t["mode"]))
    bars = alt.Chart().mark_bar().encode(
        y=alt.Y("mode:N", sort=order, title=None),
        x=alt.X("speedup_vs_fp32:Q", title="forward speed-up over fp32 (x)", stack=None),
        color=alt.Color("mode:N", sort=order, legend=None),
        tooltip=["scenario:N", "mode:N", alt.Tooltip("forward_ms:Q", format=".2f"),
                 alt.Tooltip("speedup_vs_fp32:Q", format=".2f"), alt.Tooltip("peak_gib:Q", format=".2f"),
                 alt.Tooltip("quality_minus_fp32:Q", format=".2g")])
    text = bars.mark_text(align="left", dx=3).encode(text=alt.Text("speedup_vs_fp32:Q", format=".1f"))
    panels = alt.layer(bars, text, data=d).properties(width=220, height=110).facet(
        facet=alt.Facet("panel:N", title=None), columns=3)
    subtitle = [s for s in (environment,) if s] + [
        "fp32's forward ms / the mode's (eager, the run's batch); hover for memory and the quality difference"]
    dec = t[t["decode_ms_per_token"].notna()]
    if dec.empty:
        return panels.properties(title=chart_title([title], subtitle))
    lat = alt.Chart(dec).mark_bar().encode(
        y=alt.Y("mode:N", sort=order, title=None),
        x=alt.X("decode_ms_per_token:Q", title="decode ms per token (median)"),
        color=alt.Color("mode:N", sort=order, legend=None),
        tooltip=["mode:N", alt.Tooltip("decode_ms_per_token:Q", format=".2f"),
                 alt.Tooltip("decode_ms_per_token_p90:Q", format=".2f"), alt.Tooltip("prefill_ms:Q", format=".1f")]
    ).properties(width=220, height=110, title="GPT-2 greedy decoding with the KV cache")
    return alt.vconcat(panels, lat).properties(title=chart_title([title], subtitle))


def markdown(t: pd.DataFrame, records: list[dict]) -> str:
    lines = ["# Inference per precision", "", describe_environment(records), ""]
    for i, rec in enumerate(records):
        run = rec["run"]
        lines.append(f"- {run['scenario']} at {run.get('size')}: weights {rec.get('weights')}; batch "
                     f"{run.get('batch_size')} x {run.get('seq_len')}; {rec['data'].get('eval_sequences')} "
                     f"validation sequences ({rec['_path']})")
    if (t["weights"] == "untrained").any():
        lines += ["", "`untrained`: weights never trained; their quality says nothing about serving a model."]
    lines += ["", f"speedup_vs_fp32 = the {REFERENCE_MODE} mode's forward ms / the mode's; quality_minus_fp32 = the "
              "mode's quality - the fp32 mode's (same weights, same validation batches). forward_stat: whether "
              "forward_ms is the median or (older records) the mean of the timed passes; forward_ms_std is their "
              "standard deviation.", "",
              markdown_table(t[TABLE_COLUMNS])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dtype-bench infer-table", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", help="inference.json files or folders holding them")
    p.add_argument("--out", default=None, help="output folder (default: the first folder given)")
    ns = p.parse_args(sys.argv[1:] if argv is None else argv)
    records = load(ns.paths)
    t = table(records)
    md = markdown(t, records)
    first = Path(ns.paths[0])
    out = Path(ns.out) if ns.out else first if first.is_dir() else first.parent
    files = write_outputs(out, "inference", t, md, chart(t, describe_environment(records)))
    print(md)
    print("files: " + ", ".join(str(f) for f in files))
    return 0
