"""What the one-study commands (``arm-cost``, ``fp8-sizes``, ``infer-table``, ``serve-table``)
share: reading a study folder's records, writing a table as CSV and Markdown beside its chart
(the Vega-Lite spec always, a PNG where vl-convert is installed), and saying why a speed run
marked stalled still counts."""
from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd

from benchlib.analysis.charts import renderer_available, save
from benchlib.core.records import COMPLETED, load_records


def study_records(study_dir: str | Path) -> tuple[Path, list[dict]]:
    """The folder and every readable record under it; a one-line error where there is none."""
    root = Path(study_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no study folder {str(root)!r}")
    records = load_records(root)
    if not records:
        raise FileNotFoundError(f"no readable result.json under {str(root)!r}")
    return root, records


def write_outputs(out: Path, stem: str, table: pd.DataFrame, md: str, chart: alt.TopLevelMixin,
                  chart_stem: str | None = None) -> list[Path]:
    """``<stem>.csv``, ``<stem>.md`` and ``<chart_stem>.vl.json`` (+ ``.png``) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    chart_stem = chart_stem or stem
    table.to_csv(out / f"{stem}.csv", index=False)
    (out / f"{stem}.md").write_text(md)
    (out / f"{chart_stem}.vl.json").write_text(chart.to_json())
    files = [out / f"{stem}.csv", out / f"{stem}.md", out / f"{chart_stem}.vl.json"]
    if renderer_available():
        files += save(chart, out / chart_stem, ("png",))
    return files


def judged_speed_runs(statuses) -> list[str]:
    """A sentence for speed studies whose runs a quality gate marked stalled or degraded (their
    step times still count), or nothing when every completed run is ``ok``."""
    judged = sorted(set(statuses) & (set(COMPLETED) - {"ok"}))
    if not judged:
        return []
    return [f"Runs marked {' or '.join(judged)} trained and were timed on every step: the status judges their "
            "quality against the trivial baseline, which speed runs this short are not meant to beat; their "
            "speed counts."]
