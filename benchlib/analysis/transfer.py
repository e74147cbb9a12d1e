"""Does a synthetic study's answer hold on real data? (``transfer_table``, ``dtype-bench transfer``)

Each (scenario, config) of the synthetic arm sits next to the same cell of the real arm (a study
whose records carry real data). An arm's effect and verdict are ``safety``'s: the quality gap to
the scenario's reference in % of it, positive = worse, paired by seed, with its bootstrap CI
(``contrasts``). A cell short of ``Rules.min_seeds`` counted seeds shows its gap as a point
estimate (``contrast`` at one seed) against the synthetic arm's reference, the CI blank.

Whether a cell **transfers** (``transfers``: True, False, None = not checked), in this order:

0. not checked where an arm did not run the config, either arm's quality is not established
   (and neither failed), it is the reference, or the arms differ in metric or reference config;
1. a failure (safety's ``failed``: a run diverged, stalled, degraded in training or ran out of
   memory; one run suffices, as for safety) on one arm only: False; on both: True;
2. either arm without a CI (short of seeds): None, whatever its point estimate;
3. both CIs inside +-``Rules.min_effect_pct`` (no effect that matters on either arm): True;
4. both CIs contain 0 (neither arm shows an effect; a ratio of noise means nothing): True;
5. else the ratio real / synthetic of the point gaps: True inside [1/FACTOR, FACTOR] (same sign).

Where each cell's **verdict comes from** (``source``):

- ``real``: the real arm gives a verdict by the study's rules (safe, degraded, inconclusive with
  >= min_seeds seeds; failed; the reference);
- ``synthetic (transfers: ...)``: no real verdict for this cell, and every cell of the scenario
  checked on both arms (at least one) transfers;
- ``synthetic (does not transfer: ...)``: some checked cell of the scenario does not (named);
- ``synthetic (unverified: ...)``: the real arm has the scenario but no cell could be checked
  (too few seeds: one seed decides neither a transfer nor a verdict);
- ``synthetic (no real arm: unverified)``: no real run of the scenario;
- ``none (...)``: only a real arm, without a verdict.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from benchlib.core.argparser import ArgumentParser
from benchlib.analysis.contrasts import contrast
from benchlib.analysis.recommend import safety
from benchlib.analysis.stats import Rules
from benchlib.analysis.tables import gated, resolve_study_dir, seed_series, study_frame
from benchlib.core.records import describe_environment, load_records

FACTOR = 1.5
"""A synthetic effect transfers when the real one is within this factor of it (issue: real data)."""
ARM_COLS = ["n", "metric", "reference", "gap_pct", "ci_low", "ci_high", "verdict", "reason"]
HAS_VERDICT = ("reference", "safe", "degraded", "worse", "inconclusive", "failed")


def arm_effects(df: pd.DataFrame, rules: Rules, prefer: dict | None = None) -> pd.DataFrame:
    """Per (scenario, config) of one arm: ``n`` runs, the reference, the gap and its CI and the
    verdict (``safety``); where the contrast was not tested, the point gap against the
    scenario's reference (``prefer[scenario]`` where this arm ran it) with the CI blank."""
    df = gated(df, rules)
    out = safety(df, rules).rename(columns={"runs": "n"})
    out["metric"] = [df.attrs["quality_metric"].get(s, {}).get("name") for s in out["scenario"]]
    q = seed_series(df, "quality", oriented=False)
    one = replace(rules, min_seeds=1)
    for i, r in out[out["gap_pct"].isna() & (out["verdict"] != "failed")].iterrows():
        s, c = r["scenario"], r["config"]
        refs = [x for x in ((prefer or {}).get(s), *rules.reference_configs) if x and len(q.get((s, x), ()))]
        if (s, c) not in q or not refs or refs[0] == c:
            continue
        sign = df.attrs["q_sign"].get(s, 1)
        out.loc[i, ["reference", "gap_pct"]] = refs[0], contrast(q[s, c], q[s, refs[0]], sign, one)["gap_pct"]
    return out[["scenario", "config", *ARM_COLS]]


def match(s: pd.Series, r: pd.Series, rules: Rules) -> tuple[bool | None, str]:
    """Whether a synthetic cell ``s`` transfers to its real cell ``r`` (module docstring), and why."""
    fs, fr = s["verdict"] == "failed", r["verdict"] == "failed"
    if fs or fr:
        if fs and fr:
            return True, "fails on both arms"
        bad, ok, why = ("real", "synthetic", r["reason"]) if fr else ("synthetic", "real", s["reason"])
        return False, f"failed on the {bad} arm ({why}), not on the {ok} one"
    ci = [(a["ci_low"], a["ci_high"]) for a in (s, r)]
    if not all(pd.notna(x) for pair in ci for x in pair):
        short = [f"{name} {a['n']:.0f} of {rules.min_seeds} seeds" for name, a in (("synthetic", s), ("real", r))
                 if pd.notna(a["gap_pct"]) and pd.isna(a["ci_low"])]
        return None, "not checked: " + ("; ".join(short) + ", no CI" if short else "no effect with a CI on both arms")
    m = rules.min_effect_pct(s["metric"])
    if all(-m <= lo and hi <= m for lo, hi in ci):
        return True, f"no effect of {m:g}% or more on either arm"
    if all(lo <= 0 <= hi for lo, hi in ci):
        return True, "neither arm's CI excludes 0"
    ratio = r["gap_pct"] / s["gap_pct"] if s["gap_pct"] else math.inf
    ok = 1 / FACTOR <= ratio <= FACTOR
    return ok, f"real/synthetic {ratio:.2f}: {'within' if ok else 'outside'} a factor of {FACTOR:g}"


def transfer_table(synthetic_df: pd.DataFrame, real_df: pd.DataFrame, rules: Rules = Rules()) -> pd.DataFrame:
    """Per (scenario, config) of either arm: each arm's effect (``syn_*`` / ``real_*``:
    ``ARM_COLS``), ``ratio`` real / synthetic gap, ``transfers`` (``match``), ``transfer`` (why)
    and ``source`` (module docstring). Rows are in the synthetic table's order, real-only cells
    last."""
    syn = arm_effects(synthetic_df, rules)
    prefer = syn.dropna(subset=["reference"]).groupby("scenario")["reference"].first().to_dict()
    real = arm_effects(real_df, rules, prefer)
    t = syn.rename(columns={c: f"syn_{c}" for c in ARM_COLS}).merge(
        real.rename(columns={c: f"real_{c}" for c in ARM_COLS}), on=["scenario", "config"], how="outer", sort=False)
    t["ratio"] = t["real_gap_pct"] / t["syn_gap_pct"].where(t["syn_gap_pct"] != 0)
    checks = [_check(row, rules) for _, row in t.iterrows()]
    t["transfers"], t["transfer"] = [c[0] for c in checks], [c[1] for c in checks]
    real_scenarios = set(real["scenario"])
    t["source"] = [_source(row, t, real_scenarios, rules) for _, row in t.iterrows()]
    return t


def _check(row: pd.Series, rules: Rules) -> tuple[bool | None, str]:
    """``match`` where the two cells measure the same thing: both arms ran the config, neither
    is its reference, both judged quality, with one metric, against one reference config."""
    arm = {p: pd.Series({c: row[f"{p}_{c}"] for c in ARM_COLS}) for p in ("syn", "real")}
    v, ref, met = ({p: a[k] for p, a in arm.items()} for k in ("verdict", "reference", "metric"))
    why = ("no synthetic arm" if pd.isna(v["syn"]) else "no real arm" if pd.isna(v["real"]) else
           "the reference" if "reference" in v.values() or row["config"] in ref.values() else
           "quality not established on the " + " and ".join(p for p in v if v[p] == "untestable")
           if "untestable" in v.values() and "failed" not in v.values() else
           f"the arms measure {met['syn']} and {met['real']}" if met["syn"] != met["real"] else
           f"the arms' references differ ({ref['syn']}, {ref['real']})"
           if ref["syn"] != ref["real"] and pd.notna(ref["syn"]) and pd.notna(ref["real"]) else "")
    return (None, f"not checked: {why}") if why else match(arm["syn"], arm["real"], rules)


def _source(row: pd.Series, t: pd.DataFrame, real_scenarios: set, rules: Rules) -> str:
    if row["real_verdict"] in HAS_VERDICT:
        return "real"
    s = row["scenario"]
    if pd.isna(row["syn_verdict"]):
        return f"none (no synthetic arm; the real arm has {row['real_n']:.0f} of {rules.min_seeds} seeds)"
    if s not in real_scenarios:
        return "synthetic (no real arm: unverified)"
    checked = t[(t["scenario"] == s) & t["transfers"].notna()]
    bad = checked.loc[checked["transfers"] == False, "config"].tolist()  # noqa: E712 (object column)
    if bad:
        return f"synthetic (does not transfer: {', '.join(bad)} on {s})"
    if len(checked):
        return f"synthetic (transfers: {len(checked)} of {len(checked)} checked cells of {s} match)"
    return f"synthetic (unverified: no cell of {s} checked on both arms: {_unchecked(t[t['scenario'] == s], rules)})"


def _unchecked(g: pd.DataFrame, rules: Rules = Rules()) -> str:
    """Why no cell of one scenario's rows could be checked on both arms."""
    syn = g["syn_verdict"].dropna()
    if len(syn) and syn.isin(["untestable", "failed", "reference"]).all():
        return "the synthetic arm did not establish quality there"
    return f"the real arm has {g['real_n'].max():.0f} seeds at most, {rules.min_seeds} needed"


# ---- the verb ------------------------------------------------------------------------------------
def real_data(rec: dict) -> bool:
    """A record trained on real data: its ``data.source`` is a path, or it records provenance."""
    data = rec.get("data") or {}
    return "/" in str(data.get("source") or "") or any(k.startswith("provenance_") for k in data)


def _load(paths: list[str], rules: Rules, real: bool) -> tuple[list[Path], str, pd.DataFrame]:
    roots, recs = [resolve_study_dir(p) for p in paths], []
    for path, root in zip(paths, roots):
        got = load_records(root)
        if not got:
            raise FileNotFoundError(f"no result records under study folder {path!r}")
        recs += got
    kept = [r for r in recs if real_data(r)] if real else recs
    if not kept:
        raise ValueError(f"{', '.join(paths)}: no record carries real data (data.source a path, or data.provenance_*)")
    left = f" ({len(recs) - len(kept)} runs on synthetic data left out)" if len(kept) < len(recs) else ""
    return roots, f"{len(kept)} runs{left}; {describe_environment(kept)}", study_frame(kept, rules)


def _names(roots: list[Path]) -> str:
    return " + ".join(r.name for r in roots)


def kind(source: pd.Series) -> pd.Series:
    """A source without its details: 'real', 'synthetic (transfers)', 'synthetic (unverified)', ..."""
    return source.str.replace(r"[:;].*\)$", ")", regex=True)


def _effect(row: pd.Series, p: str) -> str:
    if pd.isna(row[f"{p}_verdict"]):
        return "not run"
    g, lo, hi, n = (row[f"{p}_{c}"] for c in ("gap_pct", "ci_low", "ci_high", "n"))
    eff = "" if pd.isna(g) else f"{g:+.2f}%" + (f" [{lo:+.2f}, {hi:+.2f}]" if pd.notna(lo) else " (no CI)")
    return f"{eff} {row[f'{p}_verdict']} (n={n:.0f})".strip()


def to_markdown(t: pd.DataFrame, syn: tuple[list[Path], str], real: tuple[list[Path], str], rules: Rules) -> str:
    """transfer.md: what was compared ((folder, provenance) of each arm), the rule, the count of
    cells per source and the table."""
    kinds = kind(t["source"])
    lines = [f"# Transfer: `{_names(syn[0])}` (synthetic) against `{_names(real[0])}` (real data)", "",
             f"- synthetic: {syn[1]}", f"- real: {real[1]}", "",
             f"Effect: quality gap to the scenario's reference, % of the reference, positive = worse, paired by "
             f"seed, {rules.conf:.0%} CI (none below {rules.min_seeds} seeds, and then no real/synthetic either: "
             f"transfer.csv has the point ratio). A cell transfers when both arms fail, both CIs lie inside the "
             f"minimum effect or both contain 0, or real/synthetic is within a factor of {FACTOR:g}; a failure on "
             f"one arm only does not transfer. Verdict source: "
             + "; ".join(f"{k}: {n}" for k, n in kinds.value_counts().items()) + ".",
             "", "| scenario | config | synthetic | real | real/synthetic | transfer | verdict from |",
             "|---|---|---|---|---|---|---|"]
    for _, r in t.iterrows():
        ratio = "" if pd.isna(r[["ratio", "syn_ci_low", "real_ci_low"]]).any() else f"{r['ratio']:.2g}"
        lines.append(f"| {r['scenario']} | {r['config']} | {_effect(r, 'syn')} | {_effect(r, 'real')} | {ratio} | "
                     f"{str(r['transfer']).replace('|', '/')} | {r['source']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="dtype-bench transfer", description="A synthetic study's effects next to "
                       "a real-data study's, and where each verdict comes from")
    p.add_argument("synthetic", metavar="SYNTH_STUDY_DIR", help="The synthetic study (e.g. executed/h100/reference).")
    p.add_argument("real", metavar="REAL_STUDY_DIR", nargs="+",
                   help="The studies whose records carry real data (several: their runs together, e.g. the decoder "
                        "study and the encoder one).")
    p.add_argument("--out", metavar="DIR", help="Where transfer.csv and transfer.md go (default: the first "
                   "REAL_STUDY_DIR/transfer).")
    ns = p.parse_args(argv)
    rules = Rules()
    (sdir, sprov, sdf), (rdirs, rprov, rdf) = _load([ns.synthetic], rules, False), _load(ns.real, rules, True)
    t = transfer_table(sdf, rdf, rules)
    out = Path(ns.out) if ns.out else rdirs[0] / "transfer"
    out.mkdir(parents=True, exist_ok=True)
    t.assign(synthetic_study=_names(sdir), real_study=_names(rdirs)).to_csv(out / "transfer.csv", index=False)
    (out / "transfer.md").write_text(to_markdown(t, (sdir, sprov), (rdirs, rprov), rules)
                                     + f"\n<sub>dtype-bench transfer {ns.synthetic} {' '.join(ns.real)}</sub>\n")
    print(f"{out / 'transfer.csv'}, {out / 'transfer.md'}: {len(t)} cells; "
          + ", ".join(f"{k}: {n}" for k, n in kind(t["source"]).value_counts().items()))
    return 0


def findings_line(folder: Path) -> list[str]:
    """One line of the README's Findings from ``folder/transfer.csv`` (written by the verb): how
    many verdicts come from the real arm, and per scenario whether the synthetic arm transfers."""
    path = Path(folder) / "transfer.csv"
    if not path.is_file():
        raise FileNotFoundError(f"no {path}: run `dtype-bench transfer SYNTH_STUDY_DIR REAL_STUDY_DIR --out {folder}`")
    t = pd.read_csv(path)
    per = []
    for s, g in t.groupby("scenario"):
        checked = g["transfers"].dropna().astype(str)
        bad = g.loc[checked.index[checked == "False"], "config"].tolist()
        per.append(f"{s}: " + (f"does not transfer ({', '.join(bad)})" if bad else
                               f"transfers ({len(checked)} of {len(checked)} checked cells)" if len(checked) else
                               "no real arm" if g["real_verdict"].isna().all() else f"unverified ({_unchecked(g)})"))
    return [f"`{t['real_study'].iloc[0]}` (real data) against `{t['synthetic_study'].iloc[0]}` (synthetic): "
            f"{int((t['source'] == 'real').sum())} of {len(t)} (scenario, config) verdicts from the real arm; the "
            f"synthetic arm, within a factor of {FACTOR:g}: " + "; ".join(per) + f" (`{path.parent}/transfer.md`)."]
