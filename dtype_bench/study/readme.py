"""``executed/README.md``, written from the studies present (``dtype-bench compact --readme``,
and after every ``dtype-bench compact``): what each committed study is (the title of its own
``README.md``), its runs, device, versions and dates (from its records) and its layout
(from its files). A study is a folder ``<root>/<machine>/<name>`` holding a records table
(compacted) or a ``README.md`` (a measurement without a sweep); a fresh local study is neither
and stays out until it is compacted. The text depends on nothing else (no clock, no git), so
``tests/test_committed_studies.py`` checks that the committed file is what this writes.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from benchlib.core.records import RECORDS_TABLE, STAGE_SUFFIX, describe_environment, load_records

HEAD = """# executed/: the committed studies

<!-- Written by `dtype-bench compact --readme` from the studies below: edit a study's own
README.md (its title is what the list says it is) or its records, not this file. -->

`dtype-bench sweep params/<study>.yaml --out executed/<machine>` writes a study here in the full
layout; `dtype-bench compact executed/<machine>/<study> [executed/<machine>/<study>.pretrain]`
reduces it to the committed layout before it is added. This folder is ignored by git but for the
studies added on purpose (`git add -f executed/<machine>/<study>`), so local studies stay out of
commits.

## The committed layout (`dtype-bench compact`)

```
executed/<machine>/<study>/
  README.md                             what the study is and how it was made
  records.jsonl.gz                      every run's record, one JSON object a line: result.json as
                                        the run wrote it, plus _file, where that file was
  steps.parquet                         every run's step log, thinned (every interval, evaluation
                                        and non-finite row, the last and the lowest loss, 500 evenly
                                        spaced plain rows), one row per logged step, column run
  runs/<arm>/<scenario>/<config>/seed<k>/rank<r>.jsonl
                                        studies with arms: each rank's timed windows
  runs/<scenario>/<config>/seed<k>.ipynb  examples of the executed run notebooks: one of the LM
                                        notebook (A, B), one of the classification one (C-F)
  analysis/*.ipynb                      the executed analysis notebooks; each chart is a link to its file
  <scenario>/summary.csv, <scenario>/plots/, comparison/, overview/, scaling/, ...
                                        the tables and charts the analysis wrote, each chart once
  html/index.html                       the report: overview, analysis pages, every run's status and
                                        headline numbers (the style sheet: executed/notebook-<hash>.css)
executed/<machine>/<study>.pretrain/    its pretrain stage, compacted the same way (no checkpoint)
```

A fresh study (what a sweep writes) has instead every run's `result.json`, untrimmed step log,
`rank<r>.jsonl`, `papermill.log` and executed notebook, and the charts inside the analysis
notebooks as well as in their files.

## Reading results

- In a browser: `executed/<machine>/<study>/html/index.html` (offline, inside the repository).
- In Python: `benchlib.core.records.load_records("executed/<machine>/<study>")` gives the same
  records from either layout (each with `_path`, where its `result.json` is or was);
  `read_steps(steps_file(<that folder>))` a run's step log, from its file or the steps table;
  `benchlib.analysis.load_study` the analysis frame; `pandas.read_parquet` reads `steps.parquet`
  whole.
- Again from the records: `dtype-bench sweep params/<study>.yaml --out executed/<machine>
  --analysis_only`, then `dtype-bench compact executed/<machine>/<study>`.

## Resuming

A fresh study resumes with the same sweep command: finished records (`ok`, `degraded`,
`stalled`, `diverged`, `oom`, `skipped`) are skipped; missing, `error`, unreadable, stale and
unfinished ones run again, their record replaced. A compacted study is not resumed: the sweep
refuses it (but for `--analysis_only`) rather than run every run again; `dtype-bench compact
--expand executed/<machine>/<study> [.../<study>.pretrain]` writes its records back as
`result.json` files, the sweep then resumes it (its runs stay finished), and `dtype-bench
compact` compacts it again.
"""


MARK = "<!-- Written by `dtype-bench compact --readme`"


def is_generated(readme: Path) -> bool:
    """Whether ``readme`` is a README this module wrote."""
    return readme.exists() and MARK in readme.read_text()


def study_folders(root: Path) -> list[Path]:
    """The studies below ``root``: folders ``<machine>/<name>`` with a records table or a README."""
    return sorted(d for d in Path(root).glob("*/*") if d.is_dir()
                  and ((d / RECORDS_TABLE).exists() or (d / "README.md").exists()))


def title(readme: Path) -> str:
    """What a study's README says it is: its title (the first ``# `` line), else its first
    paragraph, on one line ('' without a README)."""
    if not readme.exists():
        return ""
    paragraphs = [p.strip() for p in readme.read_text().split("\n\n") if p.strip()]
    head = next((p for p in paragraphs if p.startswith("# ")), None)
    text = head.splitlines()[0][2:] if head else next((p for p in paragraphs if not p.startswith("#")), "")
    return " ".join(line.strip() for line in text.splitlines()).strip()


def _what(folder: Path) -> str:
    what = title(folder / "README.md")
    if what:
        return what
    if folder.name.endswith(STAGE_SUFFIX):
        study = folder.name.removesuffix(STAGE_SUFFIX)
        return (f"The pretrain stage of [`{study}`]({folder.parent.name}/{study}/): the runs that made the checkpoints "
                f"its runs load (not committed: a sweep trains a missing one again when a run still to run needs it)")
    return f"Runs of `params/{folder.name}.yaml`."


def _runs_line(records: list[dict]) -> str:
    status = Counter(r["status"] for r in records)
    scenarios = sorted({r["scenario"] for r in records})
    configs = {r["config"] for r in records}
    seeds = sorted({r["seed"] for r in records})
    return (f"{len(records)} ({', '.join(f'{k} {v}' for k, v in status.most_common())}); scenario "
            f"{', '.join(scenarios)}; {len(configs)} config{'s' * (len(configs) > 1)}; "
            f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}")


def _env_line(records: list[dict]) -> str:
    """Device, versions, commits and dates, as a table's caption says them (``describe_environment``)."""
    gpus = max((r["env"].get("device_count") or 1 for r in records), default=1)
    return describe_environment(records, brief=True) + (f" ({gpus} GPUs per host)" if gpus > 1 else "")


def _layout_line(folder: Path) -> str:
    parts = ["compacted (records.jsonl.gz)" if (folder / RECORDS_TABLE).exists() else "measurement files"]
    examples = sorted(folder.glob("runs/**/*.ipynb")) + sorted(folder.glob("*.ipynb"))
    if examples:
        parts.append(f"{len(examples)} run notebook{'s' * (len(examples) > 1)}")
    analysis = sorted(p.stem for p in folder.glob("analysis/*.ipynb"))
    if analysis:
        parts.append("analysis " + ", ".join(f"[{a}]({folder.name}/analysis/{a}.ipynb)" for a in analysis))
    if (folder / "html" / "index.html").exists():
        parts.append(f"report [html/index.html]({folder.name}/html/index.html)")
    return "; ".join(parts)


def readme_text(root: Path) -> str:
    """The README of ``root`` (``executed/``) for the studies present."""
    root = Path(root)
    lines = [HEAD]
    answer = root / "ANSWER.md"
    if answer.is_file():  # the answer as the README's Findings state it, before the list of studies
        body = answer.read_text().split("\n", 1)[1].strip("\n")
        lines += ["## The answer", "", "As `dtype-bench findings --answer ANSWER.md` wrote it ([ANSWER.md](ANSWER.md), "
                  "the README's Findings open with the same):", "", body, ""]
    lines += ["## The studies", ""]
    for machine in sorted({f.parent for f in study_folders(root)}):
        lines += [f"### {machine.name}", ""]
        for folder in (f for f in study_folders(root) if f.parent == machine):
            records = load_records(folder)
            rel = f"{machine.name}/{folder.name}"
            lines += [f"**[`{rel}`]({rel}/)**: {_what(folder)}", ""]
            if records:
                lines += [f"- runs: {_runs_line(records)}", f"- where and when: {_env_line(records)}"]
            lines += [f"- layout: {_layout_line(folder)}".replace(f"]({folder.name}/", f"]({rel}/"), ""]
    return "\n".join(lines).rstrip() + "\n"


def write_readme(root: Path) -> Path:
    path = Path(root) / "README.md"
    path.write_text(readme_text(root))
    return path
