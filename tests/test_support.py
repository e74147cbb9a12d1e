"""Which configuration runs on which GPU: derived from each configuration's requirements and a
small table of what each requirement needs (compute capability), never from names; a run the
device cannot do is refused in one line naming the requirement and the device's capability."""
import dataclasses

import pytest
import torch

from dtype_bench.cli import main
from benchlib.core import env
from benchlib.core.dtypes import (FP16_ONLY, REGISTRY, REQUIREMENTS, DtypeConfig, capability_problem, get_config,
                                  support_markdown, support_table, unmet)

T4, A100, H100 = (7, 5), (8, 0), (9, 0)


def test_requirements_not_names_decide():
    """A configuration of any name is placed by what it computes."""
    plain = DtypeConfig(name="amp_bf16_lookalike", description="", autocast_dtype="fp16")
    brainy = DtypeConfig(name="x", description="", param_dtype="bf16")
    eight = DtypeConfig(name="y", description="", autocast_dtype="bf16", fp8="rowwise")
    assert unmet(plain, T4) == [] and unmet(brainy, T4) == ["bf16"] and unmet(brainy, A100) == []
    assert unmet(eight, A100) == ["fp8"] and unmet(eight, H100) == [] and unmet(eight, None) == ["fp8"]


def test_an_fp16_only_card_runs_exactly_the_configs_that_need_neither_bf16_nor_fp8():
    t = support_table()
    fp16_col = next(c for c in t.columns if c.startswith("sm_70"))
    runs = set(t.index[t[fp16_col] != "-"])
    assert runs == {n for n, c in REGISTRY.items() if not {"bf16", "fp8"} & set(c.requirements())}
    assert {"amp_fp16", "fp32_baseline", "fp16_naive", "fp16_fp16_states", "amp_fp16_8bit_adam"} <= runs
    assert not {"amp_bf16", "bf16_pure", "amp_bf16_8bit_adam", "amp_bf16_fp8"} & runs
    # TF32 is an Ampere feature: on older cards the TF32 config computes in full fp32
    assert t.loc["fp32_tf32_matmul", fp16_col] == "as fp32" and t.loc["fp32_tf32_matmul", "sm_80+ (A100, A10, RTX 30xx)"] == "yes"


def test_the_gpu_columns_come_from_the_requirement_table(monkeypatch):
    before = [c for c in support_table().columns if c.startswith("sm_")]
    assert [c.split("+")[0] for c in before] == ["sm_70", "sm_80", "sm_89"]
    moved = dataclasses.replace(REQUIREMENTS["bf16"], min_capability=(9, 0), examples="H100")
    monkeypatch.setitem(REQUIREMENTS, "bf16", moved)
    t = support_table()
    assert [c.split("+")[0] for c in t.columns if c.startswith("sm_")] == ["sm_70", "sm_89", "sm_90"]
    assert t.loc["amp_bf16", "sm_89+ (L4, L40S, RTX 40xx, H100)"] == "-" and t.loc["amp_bf16", "sm_90+ (H100)"] == "yes"


def test_the_markdown_table_has_a_row_per_config_and_names_what_an_fp16_card_runs():
    md = support_markdown(T4, "Tesla T4")
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == len(REGISTRY) + 2 and "Tesla T4 (sm_75)" in table[0]
    cells = {line.split("|")[1].strip(" `"): [c.strip() for c in line.split("|")[2:-1]] for line in table[2:]}
    assert cells["amp_bf16"][-1] == "-" and cells["amp_fp16"][-1] == "yes"
    answer = md.splitlines()[-1]
    assert FP16_ONLY.examples in answer and "`amp_fp16`" in answer and "amp_bf16" not in answer
    assert "_noscale" not in answer  # controls are never a recommendation


def test_a_refusal_names_the_requirement_the_needed_and_the_device_s_capability():
    why = capability_problem(get_config("amp_bf16"), T4, "Tesla T4")
    assert "\n" not in why and "bf16" in why and ">= 8.0" in why and "Tesla T4 has compute capability 7.5" in why
    why = capability_problem(get_config("amp_bf16_fp8"), A100, "A100")
    assert "FP8" in why and ">= 8.9" in why and "8.0" in why
    assert capability_problem(get_config("amp_fp16"), T4, "Tesla T4") is None
    assert "no CUDA GPU" in capability_problem(get_config("amp_bf16_fp8"), None, "CPU")


@pytest.fixture
def a_t4(monkeypatch):
    """This machine as a T4: what the run sees of the device's capability and name."""
    monkeypatch.setattr(env, "capability", lambda device: T4)
    monkeypatch.setattr(env, "device_name", lambda device: "Tesla T4")


def test_the_run_checks_the_device_s_capability(a_t4):
    assert "compute capability 7.5" in env.unsupported_reason(get_config("bf16_pure"), torch.device("cpu"))
    assert env.unsupported_reason(get_config("fp16_naive"), torch.device("cpu")) is None


def test_dtype_bench_run_refuses_a_config_the_gpu_cannot_run_in_one_line(a_t4, tmp_path, capsys):
    rc = main(["run", "--scenario", "A", "--config", "amp_bf16", "--size", "tiny", "--steps", "2", "--device", "cpu",
               "--quiet", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert "skipped" in err and "bf16" in err and "compute capability 7.5" in err
    assert not (tmp_path / "steps.jsonl").exists()  # nothing trained


def test_dtype_bench_configs_support_prints_the_matrix_with_the_asked_card(capsys):
    assert main(["configs", "--support", "--capability", "7.5"]) == 0
    out = capsys.readouterr().out
    assert "| config |" in out and "sm_75" in out and "An fp16-only card" in out
    assert main(["configs"]) == 0 and "--support" in capsys.readouterr().out


def test_a_bad_capability_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["configs", "--capability", "seven"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "compute capability" in err


def test_the_readme_support_matrix_is_the_generated_one(tmp_path):
    """The README's table is what `dtype-bench configs --support --readme` writes, so it cannot
    drift from the configs' requirements; the command rewrites only the block."""
    from conftest import REPO

    from dtype_bench.cli import SUPPORT_MARKERS, main
    readme = (REPO / "README.md").read_text()
    start, end = SUPPORT_MARKERS
    assert support_markdown() + "\n" == readme[readme.index(start) + len(start) + 1:readme.index(end)], \
        "README.md's support matrix is stale: run `dtype-bench configs --support --readme README.md`"
    copy = tmp_path / "README.md"
    copy.write_text(f"# title\n\n{start}\nold\n{end}\n\nafter\n")
    assert main(["configs", "--support", "--readme", str(copy)]) == 0
    text = copy.read_text()
    assert "old" not in text and support_markdown() in text and text.endswith("after\n")
