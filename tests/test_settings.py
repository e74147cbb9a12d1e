"""The settings people type (benchlib/core/settings.py): each library's setup for a configuration
is built here on a tiny model from the setup's own data (``Setup.spec``: the library's flags and
what the user's code does), stepped, and what it did (the weights', gradients', matmul outputs' and
Adam moments' dtypes, the weights' rounding, the loss scaling, TF32) is compared with the
configuration's fields, and with every registry configuration's, to name which ones it matches.
A setup the table marks CUDA-only (it behaves differently on a CPU) is built only where CUDA is."""
import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from benchlib.core import settings
from benchlib.core.dtypes import REGISTRY, DtypeConfig, resolved_states

ROOT = Path(__file__).resolve().parents[1]
DT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
NAME = {v: k for k, v in DT.items()}
LR, STEPS, BATCH, WIDTH = 1e-4, 2, 16, 64
# The model's probe weights are +-1 and their gradient is the same constant for every element, so
# Adam moves each by exactly lr: below half a bf16/fp16 ulp at 1, round-to-nearest never moves one,
# stochastic rounding moves some; and the moments stay uniform unless they are rounded stochastically
CANDIDATES = [c for c in REGISTRY.values() if c.role == "candidate"]
CASES = [(c.name, lib) for c in CANDIDATES for lib, s in settings.setups(c).items() if s.buildable]
TF32_ATTRS = [(torch.backends, "fp32_precision"), (torch.backends.cuda.matmul, "fp32_precision"),
              (torch.backends.cudnn, "fp32_precision"), (torch.backends.cudnn.conv, "fp32_precision"),
              (torch.backends.cudnn.rnn, "fp32_precision")]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    """TF32 flags as a fresh process has them, restored after; torch.compile on its eager backend
    (torchao's optimizers compile their update: 30 s with inductor on a CPU, 1 s eager); a seed."""
    saved = [getattr(o, a) for o, a in TF32_ATTRS]
    for o, a in TF32_ATTRS:
        setattr(o, a, "none")
    _forget_hf_tf32()
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn=None, **kw: compile_(fn, **{**kw, "backend": "eager"}))
    torch.manual_seed(0)
    yield
    for (o, a), v in zip(TF32_ATTRS, saved):
        setattr(o, a, v)
    _forget_hf_tf32()


def _forget_hf_tf32():
    """HF sets TF32 once per process and value (enable_tf32 is functools.lru_cache'd): forget it."""
    if "transformers" in sys.modules:
        from transformers.utils.import_utils import enable_tf32
        if hasattr(enable_tf32, "cache_clear"):
            enable_tf32.cache_clear()


class Tiny(nn.Module):
    """A body of two Linear layers, a head, and a probe (+-1 weights whose gradient is 1 for every
    element: their loss term is zero, its gradient not); every matrix 64x64 (4096 elements:
    bitsandbytes keeps moments of smaller tensors in fp32)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH))
        self.head = nn.Linear(WIDTH, WIDTH)
        self.probe = nn.Parameter(torch.randint(0, 2, (WIDTH, WIDTH)) * 2.0 - 1)
        self.head_outside_autocast = False

    def forward(self, x, labels):
        h = self.body(x.to(self.body[0].weight.dtype))  # as an embedding's output: the weights' dtype
        if self.head_outside_autocast:
            with torch.autocast(h.device.type, enabled=False):
                logits = self.head(h.to(self.head.weight.dtype))
        else:
            logits = self.head(h)
        probe = (self.probe - self.probe.detach()).float().sum()
        return {"loss": F.cross_entropy(logits.float(), labels) + probe, "logits": logits}


def batch(device="cpu", n=BATCH):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, WIDTH, generator=g).to(device), torch.randint(0, WIDTH, (n,), generator=g).to(device)


# ---- what a configuration defines, and what a setup did ------------------------------------
def expected(c: DtypeConfig) -> dict:
    head = c.head_dtype or c.param_dtype
    scaling = "none" if c.loss_scaling == "static" and c.loss_scale == 1 else c.loss_scaling
    out = {"weights": c.param_dtype, "head_weights": head, "grads": c.param_dtype,
           "body_matmul": c.autocast_dtype or c.param_dtype, "head_matmul": c.head_dtype or c.autocast_dtype or head,
           "moments": c.state_dtypes, "head_moments": resolved_states({**c.to_dict(), "param_dtype": head}),
           "rounding": c.update_rounding if c.param_dtype != "fp32" else "nearest",
           "moment_rounding": getattr(c, "moment_rounding", "nearest") if "bf16" in c.state_dtypes else "nearest",
           "loss_scaling": f"static x{c.loss_scale:g}" if scaling == "static" else scaling,
           "eps": c.adam_eps, "fp8": c.fp8 != "none"}
    if (c.autocast_dtype is None and c.param_dtype == "fp32") or c.head_dtype == "fp32":
        out["tf32"] = c.tf32  # where no matmul runs in fp32, TF32 changes nothing
    return out


def matching(observed: dict) -> list[str]:
    """The registry's configurations whose definition the observations agree with."""
    return [n for n, c in REGISTRY.items()
            if all(v == observed[k] for k, v in expected(c).items() if k in observed)]


def _uniform(t) -> bool:
    t = getattr(t, "codes", t)  # torchao's 8-bit state: its codes (bitsandbytes' state is its codes)
    return bool((t == t.flatten()[0]).all())


def storage(t) -> str:
    t = getattr(t, "codes", t)  # torchao's 8-bit state: uint8 codes and scales
    return "8bit" if t.dtype == torch.uint8 else NAME[t.dtype]


class Probe:
    """Hooks that record the body's and the head's matmul outputs' and the body's gradient's dtypes
    during training; then what the training left: dtypes, moments' storage, the probe's rounding."""

    def __init__(self, model: Tiny):
        self.seen, self.model = {}, model
        model.body[0].register_forward_hook(self._out("body_matmul"))
        model.head.register_forward_hook(self._out("head_matmul"))
        model.body[0].weight.register_post_accumulate_grad_hook(self._grad)
        self.before = model.probe.detach().clone()

    def _grad(self, p):
        self.seen.setdefault("grads", NAME[p.grad.dtype])

    def _out(self, key):
        def hook(module, args, out):
            self.seen.setdefault(key, NAME[out.dtype])
        return hook

    def observed(self, optimizer, scaling: str) -> dict:
        m, w = self.model, self.model.body[0].weight
        state, head_state, probe = optimizer.state[w], optimizer.state[m.head.weight], optimizer.state[m.probe]
        moments = lambda s: (storage(s.get("exp_avg", s.get("state1"))), storage(s.get("exp_avg_sq", s.get("state2"))))
        moved = bool((m.probe.detach().cpu() != self.before.cpu()).any())  # a library may have moved the model
        uniform = all(_uniform(probe[k]) for k in ("exp_avg", "exp_avg_sq", "state1", "state2") if k in probe)
        eps = optimizer.param_groups[0].get("eps")
        try:
            from torchao.float8 import Float8Linear
        except ImportError:  # no torchao: nothing can have been converted
            Float8Linear = ()
        return {**self.seen, "weights": NAME[w.dtype], "head_weights": NAME[m.head.weight.dtype],
                "moments": moments(state), "head_moments": moments(head_state),
                "rounding": "nearest" if m.probe.dtype == torch.float32 or not moved else "stochastic",
                "moment_rounding": "nearest" if uniform else "stochastic",
                "loss_scaling": scaling, "eps": eps, "fp8": any(isinstance(x, Float8Linear) for x in m.modules()),
                "tf32": torch.backends.cuda.matmul.fp32_precision == "tf32"}


# ---- the user's code, as a setup's spec says -----------------------------------------------
def user_code(model: Tiny, code: dict) -> None:
    """What the user does to the model before handing it to a library (casts, head, TF32, fp8)."""
    if "model_dtype" in code:
        model.to(DT[code["model_dtype"]])
    if "head_dtype" in code:
        model.head.to(DT[code["head_dtype"]])
    model.head_outside_autocast = bool(code.get("head_outside_autocast"))
    if "tf32" in code:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = code["tf32"]
    if code.get("fp8"):
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(model.body, config=Float8LinearConfig.from_recipe_name(code["fp8"]))


def user_optimizer(model: Tiny, code: dict):
    if "optimizer" not in code:
        return None
    path, kwargs = code["optimizer"]
    module, _, cls = path.rpartition(".")
    pytest.importorskip(module.split(".")[0])
    return getattr(importlib.import_module(module), cls)(model.parameters(), lr=LR, weight_decay=0.0, **kwargs)


def static_unscale(model: Tiny, code: dict) -> None:
    if code.get("static_loss_scale"):
        for p in model.parameters():
            p.grad.div_(code["static_loss_scale"])


def scaling_of(code: dict, grad_scaler) -> str:
    if grad_scaler is not None:
        return "dynamic"
    return f"static x{code['static_loss_scale']:g}" if code.get("static_loss_scale") else "none"


# ---- one builder per library ---------------------------------------------------------------
def run_torch(spec: dict, device: str) -> dict:
    code = spec["code"]
    model = Tiny()
    user_code(model, code)
    model.to(device)
    opt = user_optimizer(model, code)
    scaler = torch.amp.GradScaler(device, init_scale=code["grad_scaler"]) if "grad_scaler" in code else None
    probe, (x, y) = Probe(model), batch(device)
    for _ in range(STEPS):
        with torch.autocast(device, dtype=DT[code.get("autocast") or "fp32"], enabled=bool(code.get("autocast"))):
            loss = model(x, y)["loss"]
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            (loss * code.get("static_loss_scale", 1.0)).backward()
            static_unscale(model, code)
            opt.step()
        opt.zero_grad(set_to_none=True)
    return probe.observed(opt, scaling_of(code, scaler))


def run_lightning(spec: dict, device: str) -> dict:
    fabric_mod = pytest.importorskip("lightning.fabric")
    code, flags = spec["code"], spec["flags"]
    fabric = fabric_mod.Fabric(accelerator=device, devices=1, precision=flags["precision"])
    model = Tiny()
    user_code(model, code)
    opt = user_optimizer(model, code)
    model_w, opt_w = fabric.setup(model, opt)
    probe, (x, y) = Probe(model), batch()
    for _ in range(STEPS):
        loss = model_w(*fabric.to_device((x, y)))["loss"]
        fabric.backward(loss * code.get("static_loss_scale", 1.0))
        static_unscale(model, code)
        opt_w.step()
        opt_w.zero_grad(set_to_none=True)
    return probe.observed(opt, scaling_of(code, getattr(fabric._precision, "scaler", None)))


class Data(torch.utils.data.Dataset):
    def __init__(self):
        self.x, self.y = batch(n=BATCH * STEPS)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def run_hf(spec: dict, device: str, tmp_path, monkeypatch) -> dict:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    code, flags = spec["code"], {k: v for k, v in spec["flags"].items() if k != "torch_compile"}
    if "tf32" in flags and device == "cpu":  # TrainingArguments refuses tf32 without an Ampere GPU
        monkeypatch.setattr("transformers.training_args.is_torch_tf32_available", lambda: True)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), use_cpu=device == "cpu", max_steps=STEPS, per_device_train_batch_size=BATCH,
        learning_rate=LR, lr_scheduler_type="constant", weight_decay=0.0, report_to=[], save_strategy="no",
        logging_strategy="no", disable_tqdm=True, **flags)
    model = Tiny()
    user_code(model, code)
    custom = user_optimizer(model, code)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Data(), optimizers=(custom, None))
    probe = Probe(model)
    trainer.train()
    return probe.observed(trainer.optimizer.optimizer, "dynamic" if trainer.accelerator.scaler is not None else "none")


def run(lib: str, setup: settings.Setup, tmp_path, monkeypatch) -> dict:
    device = "cuda" if setup.needs_cuda else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"CUDA only: {setup.needs_cuda}")
    if lib == "hf":
        return run_hf(setup.spec, device, tmp_path, monkeypatch)
    if lib == "lightning":
        return run_lightning(setup.spec, device)
    return run_torch(setup.spec, device)  # torchao's spec is the whole plain-PyTorch recipe with its pieces


def compare(c: DtypeConfig, seen: dict) -> None:
    want = expected(c)
    diff = {k: (seen.get(k), v) for k, v in want.items() if seen.get(k) != v}
    assert not diff, f"{c.name}: (observed, defined) differ: {diff}"
    assert c.name in matching(seen)


@pytest.mark.parametrize("name,lib", CASES, ids=[f"{n}-{lib}" for n, lib in CASES])
def test_each_library_setup_computes_what_its_configuration_defines(name, lib, tmp_path, monkeypatch):
    c = REGISTRY[name]
    compare(c, run(lib, settings.setups(c)[lib], tmp_path, monkeypatch))


# ---- the facts the table rests on, each built the way a user types it ----------------------
def test_lightning_bf16_true_with_a_stock_adamw_is_bf16_naive_not_bf16_pure(tmp_path, monkeypatch):
    spec = {"flags": {"precision": "bf16-true"}, "code": {"optimizer": ["torch.optim.AdamW", {}]}}
    seen = run_lightning(spec, "cpu")
    assert seen["weights"] == seen["grads"] == "bf16" and seen["moments"] == ("bf16", "bf16")
    assert seen["rounding"] == "nearest"
    assert "bf16_naive" in matching(seen) and "bf16_pure" not in matching(seen)
    pure = settings.setups(REGISTRY["bf16_pure"])["lightning"]
    assert pure.spec["flags"] == spec["flags"] and pure.spec["code"]["optimizer"][0] == "torchao.optim._AdamW"


def test_hf_bf16_true_is_bf16_autocast_over_fp32_weights(tmp_path, monkeypatch):
    seen = run_hf({"flags": {"bf16": True}, "code": {}}, "cpu", tmp_path, monkeypatch)
    assert seen["weights"] == seen["grads"] == "fp32" and seen["body_matmul"] == "bf16"
    assert seen["moments"] == ("fp32", "fp32") and seen["loss_scaling"] == "none"
    assert "amp_bf16" in matching(seen) and "bf16_naive" not in matching(seen)


def test_hf_with_bf16_weights_and_no_flag_is_bf16_naive(tmp_path, monkeypatch):
    seen = run_hf({"flags": {}, "code": {"model_dtype": "bf16"}}, "cpu", tmp_path, monkeypatch)
    assert seen["moments"] == ("bf16", "bf16") and seen["rounding"] == "nearest"
    assert "bf16_naive" in matching(seen) and "bf16_pure" not in matching(seen)


@pytest.mark.parametrize("on", [True, False])
def test_hf_tf32_sets_torch_s_matmul_precision(on, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setattr("transformers.training_args.is_torch_tf32_available", lambda: True)
    from transformers import TrainingArguments
    TrainingArguments(output_dir=str(tmp_path), use_cpu=True, tf32=on, report_to=[])
    assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if on else "ieee")


def test_hf_fp16_on_a_cpu_trains_in_fp32_which_is_why_its_check_needs_cuda(tmp_path, monkeypatch):
    seen = run_hf({"flags": {"fp16": True}, "code": {}}, "cpu", tmp_path, monkeypatch)
    assert seen["body_matmul"] == "fp32" and seen["loss_scaling"] == "none"
    assert "fp16=True" in settings.setups(REGISTRY["amp_fp16"])["hf"].needs_cuda


def test_torchao_adamw_rounds_bf16_weights_stochastically_and_keeps_bf16_moments():
    spec = {"flags": {}, "code": {"model_dtype": "bf16", "optimizer": ["torchao.optim._AdamW",
                                                                       {"bf16_stochastic_round": True}]}}
    seen = run_torch(spec, "cpu")
    assert seen["moments"] == ("bf16", "bf16") and seen["rounding"] == "stochastic"
    assert seen["moment_rounding"] == "nearest"  # _AdamW rounds its bf16 moments to nearest
    assert "bf16_pure" in matching(seen) and not {"bf16_naive", "bf16_pure_sr_moments"} & set(matching(seen))


def test_the_moment_rounding_check_can_tell_stochastically_rounded_moments():
    """The check is not vacuous: benchlib's own AdamW, moments rounded stochastically, is seen so."""
    import inspect
    from benchlib.training.adamw import AdamW
    if "moment_rounding" not in inspect.signature(AdamW).parameters:
        pytest.skip("benchlib.training.adamw.AdamW has no moment_rounding")
    spec = {"flags": {}, "code": {"model_dtype": "bf16", "optimizer": [
        "benchlib.training.adamw.AdamW", {"rounding": "stochastic", "moment_rounding": "stochastic", "impl": "reference"}]}}
    seen = run_torch(spec, "cpu")
    assert seen["moment_rounding"] == "stochastic" and seen["rounding"] == "stochastic"
    assert "bf16_pure_sr_moments" in matching(seen) and "bf16_pure" not in matching(seen)


# ---- the table: from the fields, never the names ------------------------------------------
def test_a_setup_follows_the_fields_not_the_name():
    twin = dataclasses.replace(REGISTRY["bf16_naive"], name="amp_bf16_lookalike", description="")
    assert settings.setups(twin) == settings.setups(REGISTRY["bf16_naive"])
    sr = dataclasses.replace(twin, update_rounding="stochastic")
    assert settings.setups(sr)["lightning"].spec["code"]["optimizer"][0] == "torchao.optim._AdamW"


def test_a_field_the_table_does_not_know_makes_every_cell_say_so():
    Newer = dataclasses.make_dataclass("Newer", [("new_knob", str, dataclasses.field(default="off"))],
                                       bases=(DtypeConfig,), frozen=True)
    same = Newer(name="x", description="", autocast_dtype="bf16")
    assert settings.setups(same)["hf"].buildable  # at its default, the new field changes nothing
    odd = Newer(name="y", description="", autocast_dtype="bf16", new_knob="on")
    cells = settings.setups(odd)
    assert all(s.status == "gap" and "new_knob='on'" in s.text() for s in cells.values())
    assert settings.checked(cells, odd) == "not mapped"


def test_moments_no_library_stores_are_a_gap_in_every_column():
    odd = DtypeConfig(name="z", description="", param_dtype="bf16", update_rounding="stochastic",
                      exp_avg_sq_dtype="fp32")
    assert all(s.status == "gap" for s in settings.setups(odd).values() if s.library != "hf") and \
        not settings.setups(odd)["hf"].buildable
    fp16 = DtypeConfig(name="w", description="", param_dtype="fp16", exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32")
    assert settings.setups(fp16)["torch"].spec["code"]["optimizer"] == ["bitsandbytes.optim.AdamW", {"optim_bits": 32}]


def test_the_table_has_a_row_per_candidate_and_checked_names_what_a_test_builds():
    t = settings.settings_table()
    assert list(t.index) == [c.name for c in CANDIDATES]
    md = settings.settings_markdown()
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert len(rows) == len(CANDIDATES)
    for c in CANDIDATES:
        row = settings.setups(c)
        cell = t.loc[c.name, "checked"]
        here = [settings.LIBRARIES[k] for k, s in row.items() if s.buildable and not s.needs_cuda]
        assert all(lib in cell.split(";")[0] for lib in here)
        assert ("from the library's documentation" in cell) == any(s.status in ("near", "gap") for s in row.values()) \
            or cell == "not mapped"
    assert settings.DOCS["lightning"] in md and settings.DOCS["hf"] in md


def test_cli_prints_the_settings_and_writes_the_readme_block(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dtype_bench", "configs", "--settings"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == settings.settings_markdown().strip()
    readme = tmp_path / "README.md"
    start, end = settings.SETTINGS_MARKERS
    readme.write_text(f"# x\n\n{start}\nold\n{end}\n\nafter\n")
    out = subprocess.run([sys.executable, "-m", "dtype_bench", "configs", "--settings", "--readme", str(readme)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    text = readme.read_text()
    assert "old" not in text and text.endswith("after\n") and settings.readme_block() in text


# ---- the Markdown: short cells, what every row shares said once under the table ---------------
def _split(md: str) -> tuple[str, str]:
    table, _, notes = md.partition("\n\n")
    return table, notes


def _rows(md: str) -> dict[str, list[str]]:
    """config name -> its cells (the libraries' in LIBRARIES' order, then checked)."""
    out = {}
    for line in _split(md)[0].splitlines():
        if line.startswith("| `"):
            cells = [x.strip() for x in line.strip("|").split(" | ")]
            out[cells[0].strip("`")] = cells[1:]
    return out


def test_the_markdown_cells_are_short_and_the_common_parts_are_said_once():
    md = settings.settings_markdown(roles=settings.ALL_ROLES)
    table, notes = _split(md)
    for phrase in ("torch.compile", "torch_compile", "configure_optimizers", "documentation", "http", "code:"):
        assert phrase not in table, phrase
    assert all(md.count(url) == 1 for url in settings.DOCS.values())
    rows = _rows(md)
    assert rows["amp_bf16"][:3] == ["`autocast(bf16)`", "`bf16=True`", '`precision="bf16-mixed"`']
    assert all("no compile" in cell for cell in rows["bf16_no_compile"][:3]) and "`bf16_no_compile`" in notes


def test_what_a_markdown_cell_leaves_out_its_notes_say():
    """A part the Markdown leaves out (compile, the default optimizer) is named in the notes, and nothing else
    is left out: a gap's cell names what is missing, and the notes say each one in full."""
    for roles in (("candidate",), settings.ALL_ROLES):
        md = settings.settings_markdown(roles=roles)
        notes = _split(md)[1]
        for c in settings._configs(None, roles):
            for s in settings.setups(c).values():
                assert all(p.text in notes for p in s.parts if p.short == "")
                assert {p.text for p in s.parts if p.short == ""} <= {
                    "model = torch.compile(model)", "torch_compile=True", 'optim="adamw_torch_fused"',
                    "torch.optim.AdamW(model.parameters(), fused=True)"}
                gaps = [p for p in s.parts if p.kind == "gap"]
                assert s.markdown() == "; ".join(dict.fromkeys(p.short for p in gaps)) if gaps else \
                    all(p.brief in s.markdown() for p in s.parts)
                for p in gaps:
                    assert f"  - {p.short.removeprefix('no equivalent (')[:-1]}: " in notes


def test_the_markdown_s_checked_words_say_what_the_table_s_checked_cell_says():
    rows = _rows(settings.settings_markdown(roles=settings.ALL_ROLES))
    names = {v: k for k, v in settings.SHORT_NAMES.items()}
    for c in REGISTRY.values():
        row, cell = settings.setups(c), rows[c.name][-1]
        first, _, rest = cell.partition(" (")
        said = {}
        for group in filter(None, rest.rstrip(")").split("; ")):
            libs, word = group.split(": ")
            said.update({names[lib]: word for lib in libs.split(", ")})
        for lib, s in row.items():
            want = "-" if s.status == "none" else ("docs" if not s.buildable else
                                                   "test on CUDA" if s.needs_cuda else "test")
            assert want == "-" or said.get(lib, first) == want, (c.name, lib, cell)
        long = settings.checked(row, c)
        assert ("docs" in cell) == ("documentation" in long) and ("on CUDA" in cell) == ("on CUDA" in long)


def test_cli_lists_the_candidates_and_with_all_every_config():
    out = subprocess.run([sys.executable, "-m", "dtype_bench", "configs", "--settings", "--all"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == settings.settings_markdown(roles=settings.ALL_ROLES).strip()
    assert list(_rows(out.stdout)) == list(REGISTRY)
    assert list(_rows(settings.readme_block())) == [c.name for c in CANDIDATES]
    bad = subprocess.run([sys.executable, "-m", "dtype_bench", "configs", "--all"], capture_output=True, text=True,
                         cwd=ROOT)
    assert bad.returncode != 0 and "--settings" in bad.stderr


def test_the_readme_settings_table_is_the_generated_one():
    """The README's table is what `dtype-bench configs --settings --readme` writes: it cannot drift
    from the configs' definitions."""
    from conftest import REPO

    from benchlib.core.settings import SETTINGS_MARKERS, readme_block
    readme = (REPO / "README.md").read_text()
    start, end = SETTINGS_MARKERS
    assert readme[readme.index(start) + len(start) + 1:readme.index(end)] == readme_block(), \
        "README.md's settings table is stale: run `dtype-bench configs --settings --readme README.md`"
