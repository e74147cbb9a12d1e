"""Dtype configurations as data: frozen dataclasses in ``REGISTRY``, whose fields the training
step reads (it never branches on a configuration's *name*; names follow seeds 001 and 002).

A configuration's *identity* is its numeric definition (``definition``): every field that
changes what is computed, with defaults resolved, and nothing that only names or describes
it. ``definition_hash`` is carried by every record, so that the analysis never merges two
runs that share a name but not a definition, and can name an old record by what it ran.
Each configuration also has a ``role``: only ``candidate`` configurations are setups to
recommend; ``control`` and ``ablation`` configurations isolate one mechanism and are never
a pick, a "fastest" or a frontier point.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
from dataclasses import dataclass
from typing import Literal, Optional

import torch

DtypeName = Literal["fp32", "bf16", "fp16"]
StateDtype = Literal["fp32", "bf16", "fp16", "8bit"]
"""Storage of one Adam moment: a float dtype, or bitsandbytes' block-wise 8-bit."""
Role = Literal["candidate", "control", "ablation"]
TORCH_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class DtypeConfig:
    name: str
    description: str
    param_dtype: DtypeName = "fp32"
    """dtype the model's weights (and, by default, Adam's moments) are stored in."""
    autocast_dtype: Optional[DtypeName] = None
    """torch.autocast dtype for the forward pass, or None for no autocast."""
    loss_scaling: Literal["none", "dynamic", "static"] = "none"
    """dynamic = torch.amp.GradScaler (skips overflowing steps); static = multiply the
    loss by ``loss_scale`` before backward and divide the grads after, no skipping."""
    loss_scale: float = 1.0
    optimizer: Literal["adamw", "adamw8bit"] = "adamw"
    """adamw = AdamW with its moments stored as ``exp_avg_dtype`` / ``exp_avg_sq_dtype``;
    adamw8bit = bitsandbytes AdamW8bit (both moments block-wise 8-bit)."""
    exp_avg_dtype: Optional[StateDtype] = None
    """Storage dtype of Adam's first moment; None = each weight's own dtype, as torch's AdamW
    (``model.half()`` keeps both moments in fp16). The update's arithmetic is fp32 whatever is stored."""
    exp_avg_sq_dtype: Optional[StateDtype] = None
    """Storage dtype of Adam's second moment; None = each weight's own dtype. In fp16 a squared
    gradient below ~6e-8 is stored as 0, and then nothing but eps bounds the step."""
    update_rounding: Literal["nearest", "stochastic"] = "nearest"
    """How low-precision weights absorb an update: round-to-nearest loses updates smaller
    than half the dtype's spacing; stochastic rounding keeps them in expectation (training/adamw.py)."""
    moment_rounding: Literal["nearest", "stochastic"] = "nearest"
    """How Adam's moments are written into bf16 storage (fp32 storage is exact): round-to-nearest
    keeps a bf16 second moment from ever decaying when (1 - beta2) is below half a bf16 ulp
    (beta2 0.999: v * beta2 rounds back to v); stochastic rounding lets it decay in expectation."""
    head_dtype: Optional[DtypeName] = None
    """dtype of the output head's weights and compute with autocast off; None = like the body."""
    compile: bool = True
    """torch.compile the model on CUDA (seed 001: every config but the ablation compiles)."""
    tf32: bool = True
    """allow TF32 tensor cores for fp32 matmuls and cuDNN convolutions."""
    adam_eps: float = 1e-8
    """Adam's epsilon: one value for every candidate; a config that changes it is a control."""
    fp8: Literal["none", "tensorwise", "rowwise"] = "none"
    """torchao float8 training of the body's Linear layers (Hopper and newer)."""
    role: Role = "candidate"
    """candidate: a setup a practitioner might choose; control: isolates one mechanism, never
    recommended; ablation: a candidate with one feature off. Not part of the definition."""

    def __post_init__(self) -> None:
        # eps is applied in fp32 arithmetic by every optimizer here, so 1e-8 is valid for fp16 weights too
        if not self.adam_eps > 0:
            raise ValueError(f"{self.name}: adam_eps must be > 0, got {self.adam_eps}")
        if self.loss_scaling == "dynamic" and self.param_dtype != "fp32":
            raise ValueError(f"{self.name}: GradScaler needs fp32 master weights; use static scaling")
        for field in ("exp_avg_dtype", "exp_avg_sq_dtype"):
            v = getattr(self, field)
            if (v == "8bit") != (self.optimizer == "adamw8bit") and v is not None:
                raise ValueError(f"{self.name}: {field}={v!r} goes with optimizer "
                                 f"{'adamw8bit' if v == '8bit' else 'adamw'}, not {self.optimizer!r}")
        if self.moment_rounding == "stochastic" and {"fp16", "8bit"} & set(self.state_dtypes):
            raise ValueError(f"{self.name}: moment_rounding='stochastic' is implemented for bf16 moments "
                             f"(fp32 ones are stored exactly), not {'/'.join(self.state_dtypes)}")

    @property
    def state_dtypes(self) -> tuple[str, str]:
        """The storage of (exp_avg, exp_avg_sq), defaults resolved."""
        return resolved_states(self.to_dict())

    def definition(self) -> dict:
        """The numeric definition: what this configuration computes (see the module docstring)."""
        return definition_of(self.to_dict())

    @property
    def definition_hash(self) -> str:
        return hash_definition(self.definition())

    @property
    def torch_param_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.param_dtype]

    @property
    def compute_dtype(self) -> str:
        """The dtype most matmuls run in: used to pick the precision-matched peak FLOPs."""
        if self.fp8 != "none":
            return "fp8"
        if self.autocast_dtype:
            return self.autocast_dtype
        if self.param_dtype == "fp32":
            return "tf32" if self.tf32 else "fp32"
        return self.param_dtype

    def requirements(self) -> list[str]:
        """The keys of ``REQUIREMENTS`` this configuration needs of the machine."""
        return [r for r, needed in (("bf16", "bf16" in (self.param_dtype, self.autocast_dtype, self.head_dtype)),
                                    ("bitsandbytes", self.optimizer == "adamw8bit"), ("fp8", self.fp8 != "none"))
                if needed]

    def to_dict(self) -> dict:
        """The record's ``dtype`` entry: every field, plus ``definition_hash``."""
        d = dataclasses.asdict(self)
        d["definition_hash"] = hash_definition(definition_of(d))
        return d


_NOT_NUMERIC = ("name", "description", "role", "definition_hash")
_ABSENT_AT_DEFAULT = ("moment_rounding",)
"""Numeric fields added after records carried definition hashes: left out of a definition where
they hold their default (what every earlier run did), so that no earlier hash changes."""


def resolved_states(d: dict) -> tuple[str, str]:
    """(exp_avg, exp_avg_sq) storage of a configuration given as a dict (a record's ``dtype``
    entry, old ones included): 8-bit for adamw8bit, else the field, else the weights' dtype."""
    if d.get("optimizer", "adamw") == "adamw8bit":
        return "8bit", "8bit"
    p = d.get("param_dtype", "fp32")
    return d.get("exp_avg_dtype") or p, d.get("exp_avg_sq_dtype") or p


def definition_of(d: dict) -> dict:
    """The numeric definition of a configuration given as a dict. Fields an older record
    lacks take today's defaults (the value every run had before the field existed)."""
    defaults = {f.name: f.default for f in dataclasses.fields(DtypeConfig) if f.default is not dataclasses.MISSING}
    out = {k: d.get(k, defaults.get(k)) for k in (f.name for f in dataclasses.fields(DtypeConfig))
           if k not in _NOT_NUMERIC}
    out["exp_avg_dtype"], out["exp_avg_sq_dtype"] = resolved_states(d)
    if out.get("loss_scaling") == "none":
        out["loss_scale"] = 1.0  # unused without scaling
    out["loss_scale"] = float(out["loss_scale"])
    out["adam_eps"] = float(out["adam_eps"])
    for k in _ABSENT_AT_DEFAULT:
        if out[k] == defaults[k]:
            del out[k]
    return out


def hash_definition(definition: dict) -> str:
    """12 hex digits of the SHA-256 of the definition's canonical JSON."""
    blob = json.dumps(definition, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


_c = DtypeConfig  # a short name for the table below


_CONFIGS = [
    _c(name="fp32_baseline", description="True fp32 reference: fp32 weights and compute, TF32 off",
       tf32=False),
    _c(name="fp32_tf32_matmul", description="fp32 weights, fp32 matmuls on TF32 tensor cores", tf32=True),
    _c(name="amp_fp16", description="fp32 weights, fp16 autocast, dynamic GradScaler",
       autocast_dtype="fp16", loss_scaling="dynamic", loss_scale=2.0**16),
    _c(name="amp_bf16", description="fp32 weights, bf16 autocast, no scaler (modern default)",
       autocast_dtype="bf16"),
    _c(name="bf16_pure", description="bf16 weights and compute, stochastic-rounding AdamW update",
       param_dtype="bf16", update_rounding="stochastic"),
    # Two ways to let a bf16-stored second moment decay at beta2 0.999 (see moment_rounding)
    _c(name="bf16_pure_fp32v", description="bf16_pure with Adam's second moment stored in fp32: at beta2 "
       "0.999 a bf16 v never decays (v * beta2 rounds back to v); 2 more bytes per weight",
       param_dtype="bf16", update_rounding="stochastic", exp_avg_sq_dtype="fp32"),
    _c(name="bf16_pure_sr_moments", description="bf16_pure with both Adam moments written by stochastic "
       "rounding: a bf16 v decays in expectation at beta2 0.999, at bf16_pure's memory",
       param_dtype="bf16", update_rounding="stochastic", moment_rounding="stochastic"),
    _c(name="bf16_naive", description="bf16 weights and compute, round-to-nearest update (small updates lost)",
       param_dtype="bf16"),
    # The fp16-weight family, each isolating one question (seed 002 defines fp16_naive by its
    # static scale 1024; seed 001's fp16_naive test is unscaled); their descriptions say which.
    _c(name="fp16_naive", description="fp16 weights and compute, fp32 Adam moments, static loss scale 1024",
       param_dtype="fp16", exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32", loss_scaling="static",
       loss_scale=1024.0),
    _c(name="fp16_naive_noscale", description="fp16_naive without loss scaling (the unscaled stability test)",
       param_dtype="fp16", exp_avg_dtype="fp32", exp_avg_sq_dtype="fp32", loss_scaling="static",
       loss_scale=1.0, role="control"),
    _c(name="fp16_fp16_states", description="model.half() with torch AdamW: fp16 weights and fp16 Adam "
       "moments, static loss scale 1024 (second-moment underflow)",
       param_dtype="fp16", loss_scaling="static", loss_scale=1024.0),
    _c(name="fp16_fp16_states_eps1e4", description="fp16_fp16_states with Adam eps 1e-4 (the eps control: "
       "eps bounds the step where the fp16 second moment underflows)",
       param_dtype="fp16", loss_scaling="static", loss_scale=1024.0, adam_eps=1e-4, role="control"),
    _c(name="fp16_fp16_states_noscale", description="fp16_fp16_states without loss scaling (the unscaled "
       "test as run before the moments' storage was its own field)",
       param_dtype="fp16", loss_scaling="static", loss_scale=1.0, role="control"),
    _c(name="amp_bf16_eps1e4", description="amp_bf16 with Adam eps 1e-4 (the eps control)",
       autocast_dtype="bf16", adam_eps=1e-4, role="control"),
    _c(name="amp_fp16_8bit_adam", description="amp_fp16 with bitsandbytes 8-bit AdamW",
       autocast_dtype="fp16", loss_scaling="dynamic", loss_scale=2.0**16, optimizer="adamw8bit"),
    _c(name="amp_bf16_8bit_adam", description="amp_bf16 with bitsandbytes 8-bit AdamW",
       autocast_dtype="bf16", optimizer="adamw8bit"),
    _c(name="bf16_no_compile", description="bf16_pure without torch.compile (compile ablation)",
       param_dtype="bf16", update_rounding="stochastic", compile=False, role="ablation"),
    _c(name="amp_bf16_fp32_head", description="bf16 autocast body, output head in fp32 with autocast off",
       autocast_dtype="bf16", head_dtype="fp32"),
    _c(name="bf16_body_fp32_head", description="bf16 body (stochastic rounding), fp32 head weights and compute",
       param_dtype="bf16", update_rounding="stochastic", head_dtype="fp32"),
    _c(name="amp_bf16_fp8", description="amp_bf16 with torchao float8 (tensorwise) Linear layers",
       autocast_dtype="bf16", fp8="tensorwise"),
    _c(name="amp_bf16_fp8_rowwise", description="amp_bf16 with torchao float8 (rowwise) Linear layers",
       autocast_dtype="bf16", fp8="rowwise"),
]

REGISTRY: dict[str, DtypeConfig] = {c.name: c for c in _CONFIGS}
ALIASES: dict[str, str] = {"fp32_true": "fp32_baseline"}

# Seed 001's twelve rows (+ the unscaled fp16 test): the default set of a study (`configs: full_matrix`).
FULL_MATRIX = ["fp32_baseline", "amp_fp16", "amp_bf16", "bf16_pure", "fp16_naive", "bf16_naive",
           "amp_fp16_8bit_adam", "amp_bf16_8bit_adam", "bf16_no_compile", "fp32_tf32_matmul",
           "amp_bf16_fp32_head", "bf16_body_fp32_head", "fp16_naive_noscale"]
# Seed 002's core six (`configs: core_six`).
CORE_SIX = ["fp32_true", "amp_fp16", "amp_bf16", "bf16_pure", "fp16_naive", "amp_bf16_8bit_adam"]


class UnknownNameError(ValueError):
    """A name that is not in a registry; the message lists the valid names and the closest."""


def closest(name: str, valid: list[str]) -> str:
    """The hint naming the valid name closest to ``name`` (' Did you mean ...?', or '' where ``valid``
    is empty): one that differs only in case or in - for _ first (AMP-BF16: amp_bf16), else difflib's."""
    fold = {_folded(v): v for v in reversed(valid)}  # the first of names that fold alike
    match = [fold[_folded(name)]] if _folded(name) in fold else \
        [fold[m] for m in difflib.get_close_matches(_folded(name), list(fold), n=1, cutoff=0.0)]
    return f" Did you mean {match[0]!r}?" if match else ""


def _folded(name: str) -> str:
    return str(name).lower().replace("-", "_")


def get_config(name: str) -> DtypeConfig:
    key = ALIASES.get(name, name)
    if key not in REGISTRY:
        valid = list(REGISTRY) + list(ALIASES)
        raise UnknownNameError(f"unknown dtype config {name!r}.{closest(name, valid)} "
                               f"Valid: {', '.join(valid)}")
    return REGISTRY[key]


@dataclass(frozen=True)
class InferMode:
    """An inference precision, data as a dtype configuration is: the dtype a trained model's
    weights are cast to for serving and the autocast dtype around its forward."""
    name: str
    weights: DtypeName
    autocast: Optional[DtypeName] = None


INFER_MODES = {m.name: m for m in [
    InferMode("fp32", "fp32"),
    InferMode("autocast_bf16", "fp32", "bf16"),
    InferMode("autocast_fp16", "fp32", "fp16"),
    InferMode("bf16", "bf16"),
    InferMode("fp16", "fp16"),
]}


def get_mode(name: str) -> InferMode:
    if name not in INFER_MODES:
        raise UnknownNameError(f"unknown inference mode {name!r}: use one of {', '.join(INFER_MODES)}")
    return INFER_MODES[name]


# ---- what each configuration needs of the machine: the support matrix -----------------------
@dataclass(frozen=True)
class Requirement:
    """What one of ``DtypeConfig.requirements()`` asks of the machine."""
    needs: str  # the feature, as a refusal names it
    min_capability: Optional[tuple[int, int]]  # the lowest CUDA compute capability that has it; None = any GPU
    generation: str  # the GPU generation that first has it
    examples: str  # example cards that have it
    cpu: bool = True  # whether a CPU runs it (the CPU is for tests: its numbers are never a benchmark)


REQUIREMENTS: dict[str, Requirement] = {
    "bf16": Requirement("bf16 tensor cores", (8, 0), "Ampere (sm_80) and newer", "A100, A10, RTX 30xx"),
    # torchao.float8 runs its matmuls through torch._scaled_mm, which needs sm_89; rowwise
    # scaling has failed on sm_89 in some torch versions (pytorch/pytorch#130359): run on sm_90
    # where it matters
    "fp8": Requirement("FP8 tensor cores", (8, 9), "Ada (sm_89) / Hopper (sm_90) and newer",
                       "L4, L40S, RTX 40xx, H100", cpu=False),
    # the package is checked where a run starts (core.env); bitsandbytes' CPU backend runs the tests
    "bitsandbytes": Requirement("bitsandbytes' 8-bit AdamW", None, "any CUDA GPU", "V100, T4 and newer"),
}
"""Requirement -> what it needs. The support matrix's GPU columns are these minimum compute
capabilities after ``FP16_ONLY``'s; no configuration's name is consulted."""
FP16_ONLY = Requirement("fp16 tensor cores", (7, 0), "Volta (sm_70) / Turing (sm_75)", "V100, T4")
"""The cards below every requirement that has a capability: fp16 tensor cores, no bf16 (the
support matrix's first column)."""
TF32 = Requirement("TF32 tensor cores", (8, 0), "Ampere (sm_80) and newer", "A100, A10, RTX 30xx", cpu=False)
"""Not a requirement: a config whose matmuls are TF32 (``compute_dtype``) runs without it, as
full fp32 (the support matrix says "as fp32")."""


def unmet(c: DtypeConfig, capability: Optional[tuple[int, int]]) -> list[str]:
    """The requirements of ``c`` a device lacks: a CUDA GPU of compute ``capability``, or the
    CPU (``capability`` None). Installed packages are not looked at (``core.env`` does)."""
    return [r for r in c.requirements() if not _has(REQUIREMENTS[r], capability)]


def _has(r: Requirement, capability: Optional[tuple[int, int]]) -> bool:
    return r.cpu if capability is None else tuple(capability) >= (r.min_capability or (0, 0))


def capability_problem(c: DtypeConfig, capability: Optional[tuple[int, int]], device: str) -> Optional[str]:
    """Why ``c`` cannot run on ``device`` (its name) of compute ``capability`` (None: a CPU),
    as one line naming the requirement and the device's capability; None if it can."""
    missing = unmet(c, capability)
    if not missing:
        return None
    r = REQUIREMENTS[missing[0]]
    need = f"compute capability >= {_cc(r.min_capability)}: " if r.min_capability else ""
    has = f"compute capability {_cc(capability)}" if capability else "no CUDA GPU"
    return f"{c.name} needs {r.needs} ({need}{r.generation}, e.g. {r.examples}); {device} has {has}"


def _cc(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def _runs(c: DtypeConfig, capability: Optional[tuple[int, int]]) -> str:
    """A support-matrix cell: yes, - (cannot run) or "as fp32" (TF32 matmuls without TF32)."""
    if unmet(c, capability):
        return "-"
    return "as fp32" if c.compute_dtype == "tf32" and not _has(TF32, capability) else "yes"


def support_table(capability: Optional[tuple[int, int]] = None,
                  device: Optional[str] = None) -> "pandas.DataFrame":  # noqa: F821
    """Which configuration runs where: a row per configuration (its role and requirements), a
    column per GPU generation (``FP16_ONLY``, then each minimum of ``REQUIREMENTS``), one for
    the CPU, and, given ``capability``, one for that device (named ``device``, where given)."""
    import pandas as pd
    caps = {FP16_ONLY.min_capability: FP16_ONLY.examples}
    for r in REQUIREMENTS.values():
        if r.min_capability:
            caps[r.min_capability] = ", ".join(filter(None, (caps.get(r.min_capability), r.examples)))
    rows = []
    for c in REGISTRY.values():
        row = {"name": c.name, "role": c.role, "needs": ", ".join(c.requirements()) or "-"}
        row.update({f"sm_{a}{b}+ ({examples})": _runs(c, (a, b)) for (a, b), examples in sorted(caps.items())})
        row["CPU (tests)"] = _runs(c, None)
        if capability is not None:
            sm = f"sm_{capability[0]}{capability[1]}"
            row[f"{device} ({sm})" if device else sm] = _runs(c, capability)
        rows.append(row)
    return pd.DataFrame(rows).set_index("name")


def support_markdown(capability: Optional[tuple[int, int]] = None, device: Optional[str] = None) -> str:
    """``support_table`` as a markdown table, then one line naming the candidates an
    fp16-only card runs; for the README and ``dtype-bench configs --support``."""
    t = support_table(capability, device)
    rows = [["config", *t.columns]] + [[f"`{name}`", *row] for name, row in t.iterrows()]
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    lines.insert(1, "|" + "|".join(" --- " for _ in rows[0]) + "|")
    low = [n for n, c in REGISTRY.items() if c.role == "candidate" and _runs(c, FP16_ONLY.min_capability) == "yes"]
    bnb = [n for n in low if "bitsandbytes" in get_config(n).requirements()]
    return "\n".join(lines + [
        "", f"An fp16-only card ({FP16_ONLY.generation}: {FP16_ONLY.examples}) runs "
            + ", ".join(f"`{n}`" for n in low)
            + (f" ({', '.join(bnb)} with bitsandbytes installed)." if bnb else ".")])


def config_table() -> "pandas.DataFrame":  # noqa: F821
    import pandas as pd
    rows = []
    for c in REGISTRY.values():
        rows.append({"name": c.name, "params": c.param_dtype, "autocast": c.autocast_dtype or "-",
                     "scaling": c.loss_scaling if c.loss_scaling != "static" else f"static x{c.loss_scale:g}",
                     "optimizer": c.optimizer, "moments": _moments(c),
                     "update": c.update_rounding, "head": c.head_dtype or "body",
                     "compile": c.compile, "tf32": c.tf32, "eps": c.adam_eps, "fp8": c.fp8,
                     "role": c.role, "definition": c.definition_hash, "description": c.description})
    return pd.DataFrame(rows).set_index("name")


def _moments(c: DtypeConfig) -> str:
    """The moments' storage, e.g. "bf16/fp32", and " stochastic" where they are written so."""
    return "/".join(c.state_dtypes) + (" stochastic" if c.moment_rounding == "stochastic" else "")


COST_FREE_FIELDS = ("adam_eps", "loss_scale")
"""Definition fields that change what is computed but not what it costs: Adam's eps is one
scalar in an update that runs the same kernels, and a static loss scale's value is one multiply
whatever the value. Two configurations that differ only in these run at one speed and memory."""


def cost_definition(d: dict, fp8_converted: bool | None = None) -> dict:
    """The part of a configuration's numeric definition (given as a dict, old records' too) that
    can change speed or memory: ``definition_of`` without ``COST_FREE_FIELDS``, and with ``fp8``
    "none" where the run's record says that no Linear layer was converted to float8
    (``fp8_converted`` False), since such a run executes its base configuration's kernels."""
    out = {k: v for k, v in definition_of(d).items() if k not in COST_FREE_FIELDS}
    if fp8_converted is False:
        out["fp8"] = "none"
    return out
