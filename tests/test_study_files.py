"""The study files in ``params/`` as a reader meets them: a short header that says what the study
asks and costs (its history lives in docs/journal.md), a name that says what it holds, and the
names of config sets refused in one line that points at the right one."""
import re

import pytest
import yaml
from conftest import REPO

from benchlib.core.runconfig import ConfigError
from benchlib.study.studyfile import load_study, parse_study

PARAMS = REPO / "params"
STUDY_FILES = sorted(PARAMS.glob("*.yaml"))
# A commit hash as git abbreviates it: 7-12 hex digits, with at least one letter and one digit
# (so that neither a number nor an English word counts).
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}\b", re.IGNORECASE)


def _header(path):
    """The comment lines a study file opens with."""
    lines = path.read_text().splitlines()
    end = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return lines[:end]


def test_the_commit_pattern_finds_hashes_and_passes_numbers_and_words():
    found = [m.group(0) for m in COMMIT.finditer("commits 0511d96 and 949a5b02b695; 12600 steps, "
                                                 "1000000 tokens, fp16_fp16_states, decade, 2026-11-24")]
    assert found == ["0511d96", "949a5b02b695"]


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.name)
def test_a_study_file_header_is_at_most_15_comment_lines_and_names_no_commit(path):
    header = _header(path)
    assert 0 < len(header) <= 15, f"{path.name}: a header of {len(header)} comment lines"
    comments = [line for line in path.read_text().splitlines() if "#" in line]
    hashes = [m.group(0) for line in comments for m in COMMIT.finditer(line)]
    assert not hashes, f"{path.name} names commits {hashes}: history belongs in docs/journal.md"


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.name)
def test_a_study_is_named_after_its_file_and_trains_every_run_at_one_beta2(path):
    # executed/<study>/ is where its results go, so the folder says which file made them
    try:
        study = load_study(path)
    except ConfigError as e:  # local data built from packages (docs/data/README.md), absent here
        if "no such file or directory" not in str(e):
            raise
        assert yaml.safe_load(path.read_text()).get("study") == path.stem
        return
    assert study.name == path.stem
    # The analysis refuses records of two beta2 values (``tables.one_recipe``): a study file that plans
    # them spends its GPU time, then fails its analysis (reference_real_roberta's B at 0.98 beside D and
    # F at 0.95 did, in its CPU rehearsal). Pretrain stages are not analysed.
    values = {r.cfg.beta2 for r in study.runs()}
    assert len(values) == 1, f"{path.name}: runs at beta2 {sorted(values)}"


@pytest.mark.parametrize("name, closest", [("full_matrx", "full_matrix"), ("core6", "core_six"),
                                           ("seed001", "full_matrix"), ("seed002", "core_six")])
def test_an_unknown_config_set_is_refused_in_one_line_naming_the_closest(name, closest):
    with pytest.raises(ConfigError) as e:
        parse_study({"scenarios": ["A"], "configs": name}, where="mini.yaml: ")
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"mini.yaml: configs: unknown dtype config {name!r}.")
    assert f"Did you mean {closest!r}?" in message


@pytest.mark.parametrize("name, size", [("full_matrix", 13), ("core_six", 6)])
def test_the_config_sets_expand_by_their_names(name, size):
    assert len(parse_study({"scenarios": ["A"], "configs": name}).configs) == size


def test_the_readme_and_docs_name_only_study_files_that_exist():
    # docs/journal.md is history: it may name files as they were called then
    texts = [REPO / "README.md"] + [p for p in sorted((REPO / "docs").glob("*.md")) if not p.name.startswith("journal")]
    named = {(p.name, m) for p in texts for m in re.findall(r"params/([a-z][\w.-]*\.yaml)", p.read_text())}
    missing = sorted((doc, f) for doc, f in named if not (PARAMS / f).exists())
    assert not missing, f"study files named but not in params/: {missing}"


@pytest.mark.parametrize("name, scenario", [("reference_real_b999", "A"), ("reference_real_c_b999", "C"),
                                                   ("reference_real_e_b999", "E")])
def test_a_beta2_arm_is_its_reference_studys_recipe_with_only_the_fine_tunings_beta2_changed(name, scenario):
    """A beta2 arm's verdict differs from reference_real's by beta2 alone: every shared (config, seed)
    run has reference_real's recipe but beta2 0.999, and the checkpoint C reads is made as there."""
    mine, ref = (load_study(PARAMS / f"{n}.yaml") for n in (name, "reference_real"))
    ref_runs = {(r.cfg.config, r.cfg.seed): r.cfg.to_dict() for r in ref.runs() if r.cfg.scenario == scenario}
    shared = [r for r in mine.runs() if (r.cfg.config, r.cfg.seed) in ref_runs]
    assert {r.cfg.scenario for r in mine.runs()} == {scenario} and len(shared) >= 6
    for r in shared:
        d, e = r.cfg.to_dict(), ref_runs[(r.cfg.config, r.cfg.seed)]
        assert {k for k in d if d[k] != e.get(k)} == {"beta2", "extra"} and (d["beta2"], e["beta2"]) == (0.999, 0.95)
    if mine.pretrain:
        (pre,), (ref_pre,) = (sum(s.pretrain_runs().values(), []) for s in (mine, ref))
        a, b = pre.cfg.to_dict(), ref_pre.cfg.to_dict()
        assert {k for k in a if a[k] != b.get(k)} == {"extra"}


@pytest.mark.parametrize("name, beta2", [("reference_debdocs", 0.95), ("reference_debdocs_b999", 0.999)])
def test_a_on_the_larger_corpus_is_reference_reals_a_with_only_the_text_changed(name, beta2):
    """A verdict that differs from reference_real's (or its beta2 arm's) A is the corpus's: the recipe
    is A's but for the data (and beta2 in the 0.999 arm), and the 1,500 steps read the text about once."""
    from benchlib.data.files import read_provenance
    mine, ref = (load_study(PARAMS / f"{n}.yaml") for n in (name, "reference_real"))
    ref_runs = {(r.cfg.config, r.cfg.seed): r.cfg.to_dict() for r in ref.runs() if r.cfg.scenario == "A"}
    shared = [r for r in mine.runs() if (r.cfg.config, r.cfg.seed) in ref_runs]
    assert len(shared) >= 12 and {r.cfg.scenario for r in mine.runs()} == {"A"}
    for r in shared:
        d, e = r.cfg.to_dict(), ref_runs[(r.cfg.config, r.cfg.seed)]
        changed = {k for k in d if d[k] != e.get(k)}
        assert changed == ({"data", "extra"} if beta2 == 0.95 else {"data", "extra", "beta2"}) and d["beta2"] == beta2
        assert d["data"].endswith("debdocs")
    corpus = REPO / shared[0].cfg.data
    if (corpus / "provenance.yaml").is_file():  # built here (docs/data/README.md): about one pass
        from benchlib.core.runconfig import resolved
        chars, run = read_provenance(corpus)["characters"], resolved(shared[0].cfg)
        tokens = run.steps * run.batch_size * run.grad_accum * run.seq_len
        assert 0.8 < chars / 4.04 / tokens < 1.3


@pytest.mark.parametrize("name, quality_arm", [("reference_horizon", "reference_debdocs"),
                                               ("reference_horizon_b999", "reference_debdocs_b999")])
def test_the_horizon_arm_is_the_quality_arms_a_four_times_longer_with_its_gap_drawn_against_the_step(name, quality_arm):
    """What differs from the quality arm is the horizon alone (steps, and the evaluations that draw the
    gap against the step), and the study asks for the horizon analysis."""
    mine, ref = (load_study(PARAMS / f"{n}.yaml") for n in (name, quality_arm))
    ref_runs = {(r.cfg.config, r.cfg.seed): r.cfg.to_dict() for r in ref.runs()}
    runs = list(mine.runs())
    assert {r.cfg.scenario for r in runs} == {"A"} and "horizon" in mine.analyses
    assert {"fp32_tf32_matmul", "amp_bf16", "bf16_pure", "bf16_pure_fp32v", "bf16_pure_sr_moments",
            "amp_bf16_8bit_adam", "fp16_naive"} <= {r.cfg.config for r in runs}
    assert len({r.cfg.seed for r in runs}) >= 3
    for r in runs:
        d, e = r.cfg.to_dict(), ref_runs[(r.cfg.config, r.cfg.seed)]
        assert {k for k in d if d[k] != e.get(k)} == {"steps", "eval_every", "extra"}
        assert d["steps"] >= 4 * e["steps"]



@pytest.mark.parametrize("name, debdocs, beta2", [("reference_horizon_source_b999", "reference_horizon_b999", 0.999),
                                                  ("reference_horizon_source", "reference_horizon", 0.95)])
def test_the_horizon_arm_on_the_hosts_python_source_differs_from_the_debdocs_one_by_its_corpus_alone(name, debdocs, beta2):
    """A gap that grows on one horizon arm and not the other is the corpus's (read 0.75 times against
    3.9), not a recipe's; the two pysource arms differ by beta2 alone."""
    mine, ref = (load_study(PARAMS / f"{n}.yaml") for n in (name, debdocs))
    ref_runs = {(r.cfg.config, r.cfg.seed): r.cfg.to_dict() for r in ref.runs()}
    runs = list(mine.runs())
    assert len(runs) == len(ref_runs) and "horizon" in mine.analyses
    for r in runs:
        d = r.cfg.to_dict()
        differ = {k for k in d if d[k] != ref_runs[(r.cfg.config, r.cfg.seed)].get(k)}
        assert differ - {"state_every"} == {"data", "extra"}  # how often a run saves its state changes no step
        assert d["data"].endswith("pysource") and d["beta2"] == beta2


def test_the_one_gpu_speed_study_is_the_speed_studys_recipe_under_another_name():
    """Its multipliers differ from reference_real_speed's by where the runs were timed, not how."""
    mine, ref = (load_study(PARAMS / f"{n}.yaml") for n in ("reference_real_speed_onegpu", "reference_real_speed"))
    ref_runs = {(r.cfg.scenario, r.cfg.config, r.cfg.seed): r.cfg.to_dict() for r in ref.runs()}
    runs = list(mine.runs())
    assert len(runs) == len(ref_runs) and mine.order == ref.order and mine.notebook_seeds == ref.notebook_seeds
    for r in runs:
        d, e = r.cfg.to_dict(), ref_runs[(r.cfg.scenario, r.cfg.config, r.cfg.seed)]
        assert {k for k in d if d[k] != e.get(k)} == {"extra"} and d["extra"]["study"] == "reference_real_speed_onegpu"


def test_config_seeds_for_a_config_on_one_scenario_wins_over_the_configs_and_a_bad_key_is_named():
    """amp_fp16 needs 11 paired seeds on C and 5 on A at beta2 0.95 (the answer's seed plan): more seeds
    for one (scenario, config) without running them everywhere."""
    d = {"study": "x", "scenarios": ["A", "C"], "configs": ["fp32_baseline", "amp_fp16"], "seeds": [0, 1, 2, 3],
         "size": "tiny", "config_seeds": {"amp_fp16": [0], "C/amp_fp16": [0, 1, 2, 3], "A/fp32_baseline": [0, 1]}}
    runs = {(r.cfg.scenario, r.cfg.config): [] for r in parse_study(d).runs()}
    for r in parse_study(d).runs():
        runs[(r.cfg.scenario, r.cfg.config)].append(r.cfg.seed)
    assert runs == {("A", "fp32_baseline"): [0, 1], ("A", "amp_fp16"): [0], ("C", "fp32_baseline"): [0, 1, 2, 3],
                    ("C", "amp_fp16"): [0, 1, 2, 3]}
    for key, named in (("D/amp_fp16", "'D' is not one of the study's scenarios"), ("C/amp_fp61", "'amp_fp61'"),
                       ("C/amp_fp16", "7")):
        with pytest.raises(ConfigError, match=re.escape(named)) as e:
            parse_study({**d, "config_seeds": {key: [7] if key == "C/amp_fp16" else [0]}})
        assert key in str(e.value) and "\n" not in str(e.value)
