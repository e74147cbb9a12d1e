"""Where things go on a chart, computed before Vega draws it: axis domains that follow the healthy
runs, and direct labels that do not overlap (Vega-Lite does not avoid text collisions), placed in
the pixel space of a plot of known size.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

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
