"""What each dtype configuration is in other libraries' words: the settings a practitioner types
in plain PyTorch, the Hugging Face Trainer, Lightning and torchao to train as a configuration of
``dtypes.REGISTRY`` does, derived from its fields (never from its name).

A library's cell is a ``Setup``: its parts, each a *flag* (the library's own setting or API),
*code* (a line the user writes), *near* (the closest thing there is, and what differs) or a *gap*
(nothing in reach does it), and the same as data (``spec``) that tests/test_settings.py builds on a
tiny model and checks against the configuration's fields. A field this module does not know
(outside ``KNOWN_FIELDS``) set off its default makes every cell a gap that names it. Each part has
its full text (``settings_table``) and a short one (``settings_markdown``, whose ``NOTES`` say once
what every row shares). What the libraries do was read in their installed code (transformers 5.24,
accelerate 1.15, lightning 2.6, torchao 0.18, bitsandbytes 0.50) and, where "checked" says so, run.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Literal, Optional, get_args

from benchlib.core.dtypes import REGISTRY, DtypeConfig, Role

LIBRARIES: dict[str, str] = {"torch": "plain PyTorch", "hf": "HF Trainer", "lightning": "Lightning",
                             "torchao": "torchao"}
"""Library key -> its column's name."""
SHORT_NAMES = {"torch": "PyTorch", "hf": "HF", "lightning": "Lightning", "torchao": "torchao"}
"""Library key -> its name in the Markdown's "checked" cells."""
DOCS: dict[str, str] = {
    "hf": "https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments",
    "lightning": "https://lightning.ai/docs/pytorch/stable/common/precision_basic.html",
    "torchao": "https://github.com/pytorch/ao/blob/main/torchao/optim/README.md",
    "torch": "https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html",
}
"""Library key -> the documentation page a cell that no test here checks rests on."""
DOC_NAMES = {"hf": "HF TrainingArguments", "lightning": "Lightning precision_basic",
             "torchao": "torchao optim README", "torch": "torch AdamW"}
"""Library key -> the words of its ``DOCS`` link in the Markdown's notes."""
SETTINGS_MARKERS = ("<!-- settings:start -->", "<!-- settings:end -->")
"""The README's block that ``readme_block`` fills (``dtype-bench configs --settings --readme README.md``)."""
ALL_ROLES: tuple[str, ...] = get_args(Role)

KNOWN_FIELDS = frozenset({
    "name", "description", "role", "param_dtype", "autocast_dtype", "loss_scaling", "loss_scale", "optimizer",
    "exp_avg_dtype", "exp_avg_sq_dtype", "update_rounding", "moment_rounding", "head_dtype", "compile", "tf32",
    "adam_eps", "fp8"})
"""The DtypeConfig fields whose meaning this module maps; any other one, set off its default, is a gap."""
TORCH = {"fp32": "torch.float32", "bf16": "torch.bfloat16", "fp16": "torch.float16"}
DEFAULT_EPS = 1e-8  # torch's, bitsandbytes', torchao's AdamW and HF's adam_epsilon
GRADSCALER_INIT = 2.0 ** 16  # torch.amp.GradScaler's init_scale (what HF and Lightning create)
OPTIMIZERS = {
    "torch": ("torch.optim.AdamW", {"fused": True}),
    "bnb8": ("bitsandbytes.optim.AdamW8bit", {}),
    "bnb32": ("bitsandbytes.optim.AdamW", {"optim_bits": 32}),
    "ao_sr": ("torchao.optim._AdamW", {"bf16_stochastic_round": True}),
}
"""Optimizer kind -> (class path, keyword arguments): what ``Plan.optimizer`` names."""
OPTIMIZER_SHORT = {"torch": "AdamW", "bnb8": "bnb.optim.AdamW8bit", "bnb32": "bnb.optim.AdamW", "ao_sr": "_AdamW"}
"""Optimizer kind -> its class as the Markdown names it (the notes say what ``bnb`` and ``_AdamW`` are)."""

Kind = Literal["flag", "code", "near", "gap"]
_ORDER = ("flag", "code", "near", "gap")


@dataclass(frozen=True)
class Part:
    """One thing to type (``flag``/``code``), the closest thing there is (``near``), or what is missing
    (``gap``): ``text`` is what to type (a gap's is prose), ``note`` says more."""
    text: str
    kind: Kind
    note: str = ""
    short: Optional[str] = None
    """The Markdown's words for it: None = ``text`` as code; "" = left out (the notes say it once)."""

    @property
    def brief(self) -> str:
        return f"`{self.text}`" if self.short is None else self.short


@dataclass(frozen=True)
class Setup:
    """One library's way to train as a configuration does."""
    library: str
    parts: tuple[Part, ...]
    spec: dict = field(default_factory=dict, compare=False)
    """The setup as data, for the tests: ``flags`` (the library's settings) and ``code`` (what the
    user's code does: model_dtype, head_dtype, head_outside_autocast, autocast, grad_scaler,
    static_loss_scale, optimizer [path, kwargs], tf32, fp8, compile)."""
    needs_cuda: Optional[str] = None
    """Why a CPU cannot check this setup (it behaves differently there), or None."""

    @property
    def status(self) -> str:
        """``none`` (nothing from this library is needed), else the worst kind among the parts."""
        return max((p.kind for p in self.parts), key=_ORDER.index) if self.parts else "none"

    @property
    def buildable(self) -> bool:
        """Whether the setup computes what the configuration defines (every part a flag or code)."""
        return self.status in ("flag", "code")

    def text(self) -> str:
        """Every part in full, joined with " + "; "-" for no parts."""
        return " + ".join(_render(p, self.library) for p in self.parts) or "-"

    def markdown(self) -> str:
        """The short cell: only what is missing where something is, else the parts' short forms."""
        gaps = [p.brief for p in self.parts if p.kind == "gap"]
        shown = gaps or [p.brief for p in self.parts if p.brief]
        return ("; " if gaps else " + ").join(dict.fromkeys(shown)) or ("defaults" if self.parts else "-")


def _render(p: Part, library: str) -> str:
    if p.kind == "gap":
        return p.text if p.text.startswith(("no ", "not mapped")) else f"no equivalent: {p.text}"
    text = f"`{p.text}`" + (f" ({p.note})" if p.note else "")
    if p.kind == "near":
        return f"nearest: {text}"
    return f"code: {text}" if p.kind == "code" and library in ("hf", "lightning") else text


@dataclass(frozen=True)
class Plan:
    """What a configuration asks of any library, read from its fields."""
    weights: str  # the body's weights
    head: str  # the output head's weights
    autocast: Optional[str]
    head_code: bool  # the head runs in its own dtype with autocast off (a forward the user writes)
    scaling: str  # none | dynamic | static (static with a scale of 1 is none)
    loss_scale: float
    optimizer: Optional[str]  # a key of OPTIMIZERS, or None: no optimizer in reach stores these moments
    optimizer_gap: Optional[Part]  # why optimizer is None
    eps: float
    tf32: Optional[bool]  # None where no matmul runs in fp32 (then TF32 changes nothing)
    compile: bool
    fp8: Optional[str]
    unknown: tuple[str, ...]  # "field=value" of fields this module does not know


def plan(c: DtypeConfig) -> Plan:
    head = c.head_dtype or c.param_dtype
    optimizer, why = _optimizer(c, {c.param_dtype, head})
    fp32_matmuls = (c.autocast_dtype is None and c.param_dtype == "fp32") or c.head_dtype == "fp32"
    scaling = "none" if c.loss_scaling == "static" and float(c.loss_scale) == 1.0 else c.loss_scaling
    return Plan(weights=c.param_dtype, head=head, autocast=c.autocast_dtype,
                head_code=c.head_dtype is not None and (c.autocast_dtype is not None or head != c.param_dtype),
                scaling=scaling, loss_scale=float(c.loss_scale), optimizer=optimizer, optimizer_gap=why,
                eps=float(c.adam_eps), tf32=c.tf32 if fp32_matmuls else None, compile=bool(c.compile),
                fp8=None if c.fp8 == "none" else c.fp8, unknown=unknown_fields(c))


def unknown_fields(c: DtypeConfig) -> tuple[str, ...]:
    """``field=value`` for each field outside ``KNOWN_FIELDS`` whose value is not its default."""
    out = []
    for f in dataclasses.fields(c):
        if f.name in KNOWN_FIELDS:
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        if getattr(c, f.name) != default:
            out.append(f"{f.name}={getattr(c, f.name)!r}")
    return tuple(out)


def _gap(text: str, missing: str) -> Part:
    return Part(text, "gap", short=f"no equivalent ({missing})")


def _optimizer(c: DtypeConfig, weights: set[str]) -> tuple[Optional[str], Optional[Part]]:
    """The optimizer that stores the moments and rounds the weights as ``c`` says, or why none does."""
    if c.optimizer == "adamw8bit":
        return "bnb8", None
    if c.optimizer != "adamw":
        return None, _gap(f"optimizer={c.optimizer!r}", f"optimizer={c.optimizer!r}")
    fields = (c.exp_avg_dtype, c.exp_avg_sq_dtype)
    follows = all(f in (None, w) for f in fields for w in weights)  # each moment in its weight's dtype
    fp32 = all((f or w) == "fp32" for f in fields for w in weights)
    stochastic = c.update_rounding == "stochastic" and "bf16" in weights  # fp32 weights are updated exactly
    if c.update_rounding == "stochastic" and "fp16" in weights:
        return None, _gap("no optimizer rounds fp16 weights stochastically", "SR fp16 weights")
    stored = "/".join(sorted({f or w for f in fields for w in weights} - {"fp32"}))
    if getattr(c, "moment_rounding", "nearest") != "nearest" and stored:
        return None, _gap(f"no optimizer writes {stored} moments by {c.moment_rounding} rounding (torch's and "
                          f"torchao's round them to nearest)", f"SR {stored} moments")
    if follows:
        return ("ao_sr" if stochastic else "torch"), None
    if fp32 and not stochastic:
        return "bnb32", None
    m, v = c.state_dtypes
    return None, _gap(f"no optimizer keeps {m} exp_avg (m) and {v} exp_avg_sq (v) for {c.param_dtype} weights"
                      f"{' rounded stochastically' if stochastic else ''} (torch's and torchao's keep both "
                      f"moments in the weight's dtype, bitsandbytes' both in fp32 or 8-bit)", f"{m} m, {v} v")


class _Cell:
    """Collects a Setup's parts and spec."""

    def __init__(self, library: str):
        self.library, self.parts, self.flags, self.code, self.cuda = library, [], {}, {}, None

    def add(self, kind: Kind, text: str, note: str = "", short: Optional[str] = None,
            flags: Optional[dict] = None, **code) -> None:
        self.parts.append(Part(text, kind, note, short))
        self.flags.update(flags or {})
        self.code.update(code)

    def setup(self) -> Setup:
        return Setup(self.library, tuple(self.parts), {"flags": self.flags, "code": self.code}, self.cuda)


def _optimizer_text(p: Plan, short: bool = False) -> str:
    path, kwargs = OPTIMIZERS[p.optimizer]
    args = [] if short else ["model.parameters()"]
    args += [f"{k}={v!r}" for k, v in kwargs.items() if not (short and k == "fused")]
    args += [f"eps={p.eps:g}"] if p.eps != DEFAULT_EPS else []
    return f"{OPTIMIZER_SHORT[p.optimizer] if short else path}({', '.join(args)})"


def _optimizer_spec(p: Plan) -> list:
    path, kwargs = OPTIMIZERS[p.optimizer]
    return [path, {**kwargs, **({"eps": p.eps} if p.eps != DEFAULT_EPS else {})}]


def _add_optimizer(cell: _Cell, p: Plan, note: str = "") -> None:
    """The optimizer as code (as flag in plain PyTorch), or why there is none; torch's AdamW at the
    default eps is left out of the Markdown (the notes name it)."""
    if not p.optimizer:
        return cell.parts.append(p.optimizer_gap)
    default = p.optimizer == "torch" and p.eps == DEFAULT_EPS
    cell.add("flag" if cell.library == "torch" and p.optimizer == "torch" else "code", _optimizer_text(p), note,
             "" if default else f"`{_optimizer_text(p, short=True)}`", optimizer=_optimizer_spec(p))


def _add_fp8(cell: _Cell, p: Plan, kind: Kind = "code", note: str = "") -> None:
    cell.add(kind, f'torchao.float8.convert_to_float8_training(model.body, config=Float8LinearConfig.'
                   f'from_recipe_name("{p.fp8}"))', note, f"float8 ({p.fp8})", fp8=p.fp8)
    cell.cuda = "float8 matmuls (torch._scaled_mm) need an sm_89+ GPU"


def _add_compile(cell: _Cell, p: Plan, text: str, kind: Kind = "flag", note: str = "", flags=None) -> None:
    if p.compile:  # the Markdown leaves it out: the notes say it once
        cell.add(kind, text, note, "", flags=flags, **({} if flags else {"compile": True}))
    else:
        cell.add("flag", "no torch.compile", short="no compile")


def _cast(dtype: str, module: str = "model") -> dict:
    """The cast in full (``text``) and short (``short``), as keywords of ``_Cell.add``."""
    return {"text": f"{module}.to({TORCH[dtype]})", "short": f"`{module}.to({dtype})`"}


def _head(cell: _Cell, p: Plan) -> None:
    """The head run in its own dtype with autocast off: a line of the model's forward."""
    if p.head_code:
        text = 'with torch.autocast("cuda", enabled=False): logits = model.head(h.float())'
        cell.add("code", text if p.autocast else "logits = model.head(h.float())", "in the model's forward",
                 "head outside autocast" if p.autocast else "`model.head(h.float())`", head_outside_autocast=True)


def torch_setup(p: Plan, lightning: bool = False) -> Setup:
    """Plain PyTorch, with bitsandbytes' or torchao's optimizer where torch has none; ``lightning``: the
    same in a LightningModule, where Trainer(precision=...) (or Fabric's) does the casts and autocast."""
    cell = _Cell("lightning" if lightning else "torch")
    precision = _lightning_precision(cell, p) if lightning else _torch_precision(cell, p)
    _head(cell, p)
    if p.scaling == "static":
        s = f"{p.loss_scale:g}"
        code, note = ((f"training_step returns loss * {s}", f"grads / {s} in on_before_optimizer_step; "
                       f"{precision} has no loss scaler") if lightning else
                      (f"(loss * {s}).backward()", f"grads / {s} before the step; GradScaler refuses fp16 gradients"))
        cell.add("code", code, note, f"static scale {s}", static_loss_scale=p.loss_scale)
    _add_optimizer(cell, p, "from configure_optimizers" if lightning else "")
    if p.tf32 is not None:
        text = ("torch.backends.cuda.matmul.allow_tf32 = True" if p.tf32 else
                "torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False")
        cell.add("code" if lightning else "flag", text, "no flag" if lightning else "", f"`allow_tf32={p.tf32}`",
                 tf32=p.tf32)
    if p.fp8:
        _add_fp8(cell, p, note="in configure_model; no flag" if lightning else "")
    _add_compile(cell, p, "model = torch.compile(model)", *(("code", "before fit") if lightning else ("flag", "")))
    return cell.setup()


def _torch_precision(cell: _Cell, p: Plan) -> None:
    if p.weights != "fp32":
        cell.add("flag", **_cast(p.weights), model_dtype=p.weights)
    if p.head != p.weights:
        cell.add("flag", **_cast(p.head, "model.head"), head_dtype=p.head)
    if p.autocast:
        cell.add("flag", f'with torch.autocast("cuda", dtype={TORCH[p.autocast]}):', "forward and loss",
                 f"`autocast({p.autocast})`", autocast=p.autocast)
    if p.scaling == "dynamic":
        init = "" if p.loss_scale == GRADSCALER_INIT else f"init_scale={p.loss_scale:g}"
        cell.add("flag", f'scaler = torch.amp.GradScaler("cuda"{", " + init if init else ""})', "",
                 f"`GradScaler({init})`", grad_scaler=p.loss_scale)


def lightning_setup(p: Plan) -> Setup:
    """Lightning's Trainer(precision=...) (Fabric takes the same values); the optimizer is the user's."""
    return torch_setup(p, lightning=True)


def _lightning_precision(cell: _Cell, p: Plan) -> str:
    """Adds the precision flag (and the casts it cannot do) and returns the flag's value."""
    if p.head != p.weights and p.weights != "fp32":  # X-true casts the whole module, the head too
        cell.add("flag", 'precision="32-true"', flags={"precision": "32-true"})
        body, head = _cast(p.weights), _cast(p.head, "model.head")
        cell.add("code", f"{body['text']}; {head['text']}", f"{p.weights}-true would cast the head too",
                 f"{body['short']} + {head['short']}", model_dtype=p.weights, head_dtype=p.head)
        return "32-true"
    value = None
    if p.weights != "fp32":
        value = None if p.autocast or p.scaling == "dynamic" else {"bf16": "bf16-true", "fp16": "16-true"}[p.weights]
    elif p.autocast is None:
        value = "32-true" if p.scaling != "dynamic" else None
    elif p.autocast == "bf16" and p.scaling == "none":
        value = "bf16-mixed"
    elif p.autocast == "fp16" and p.scaling == "dynamic" and p.loss_scale == GRADSCALER_INIT:
        value = "16-mixed"
        cell.cuda = "on a CPU Lightning turns 16-mixed into bf16-mixed"
    if value is None:
        what = f"{p.weights} weights, {p.autocast or 'no'} autocast and {p.scaling} loss scaling"
        cell.parts.append(_gap(f"no precision flag for {what}", f"precision for {what}"))
        return "no precision flag"
    cell.add("flag", f'precision="{value}"', flags={"precision": value})
    if p.head != p.weights:
        cell.add("code", **_cast(p.head, "model.head"), head_dtype=p.head)
    return value


def hf_setup(p: Plan) -> Setup:
    """transformers' Trainer: TrainingArguments flags, and what it has no flag for."""
    cell = _Cell("hf")
    _hf_precision(cell, p)
    if p.head != p.weights:
        cell.add("code", **_cast(p.head, "model.head"), head_dtype=p.head)
    _head(cell, p)
    if p.scaling == "static":
        cell.parts.append(_gap("no flag for a static loss scale (fp16=True is autocast with a dynamic GradScaler, "
                               "which refuses fp16 gradients)", "static loss scale"))
    if p.optimizer in ("torch", "bnb8"):
        optim = {"torch": "adamw_torch_fused", "bnb8": "adamw_bnb_8bit"}[p.optimizer]
        cell.add("flag", f'optim="{optim}"', short="" if optim == "adamw_torch_fused" else None, flags={"optim": optim})
        if p.eps != DEFAULT_EPS:
            cell.add("flag", f"adam_epsilon={p.eps:g}", flags={"adam_epsilon": p.eps})
    elif p.optimizer:  # no Trainer flag names it
        note = "no optim flag keeps 32-bit moments unpaged" if p.optimizer == "bnb32" else "no optim flag"
        cell.add("code", f"Trainer(optimizers=({_optimizer_text(p)}, None))", note,
                 f"`optimizers=({_optimizer_text(p, short=True)}, None)`", optimizer=_optimizer_spec(p))
    else:
        cell.parts.append(p.optimizer_gap)
    if p.tf32 is not None:
        cell.add("flag", f"tf32={p.tf32}", flags={"tf32": p.tf32})
    if p.fp8:
        _add_fp8(cell, p, note="before Trainer; no flag")
    _add_compile(cell, p, "torch_compile=True", flags={"torch_compile": True})
    return cell.setup()


def _hf_precision(cell: _Cell, p: Plan) -> None:
    if p.weights != "fp32":
        cell.add("code", **_cast(p.weights), note=f"no flag; or from_pretrained(..., dtype={TORCH[p.weights]}); "
                 "bf16, fp16 off", model_dtype=p.weights)
        if p.autocast:
            cell.parts.append(_gap(f"no flag for {p.autocast} autocast over {p.weights} weights",
                                   f"{p.autocast} autocast over {p.weights} weights"))
    elif p.autocast == "bf16" and p.scaling == "none":
        cell.add("flag", "bf16=True", flags={"bf16": True})
    elif p.autocast == "fp16" and p.scaling == "dynamic":
        cell.add("flag", "fp16=True", flags={"fp16": True})
        cell.cuda = "on a CPU accelerate turns fp16=True's autocast and GradScaler off (it trains in fp32)"
        if p.loss_scale != GRADSCALER_INIT:
            cell.parts.append(_gap(f"no flag for a GradScaler init_scale of {p.loss_scale:g} (fp16=True starts "
                                   f"at {GRADSCALER_INIT:g})", f"init_scale {p.loss_scale:g}"))
    elif p.autocast or p.scaling == "dynamic":
        cell.parts.append(_gap(f"no flag for {p.autocast or 'no'} autocast with {p.scaling} loss scaling",
                               f"{p.autocast or 'no'} autocast, {p.scaling} scaling"))


def torchao_setup(p: Plan) -> Setup:
    """torchao's pieces only (the rest of the recipe is the plain-PyTorch column's)."""
    cell = _Cell("torchao")
    if p.optimizer == "ao_sr":
        cell.add("flag", _optimizer_text(p), short=f"`{_optimizer_text(p, short=True)}`")
    elif p.optimizer == "bnb8":
        cell.add("near", "torchao.optim.AdamW8bit(model.parameters())",
                 "its own block-wise 8-bit moments, not bitsandbytes' numbers", "nearest: `AdamW8bit`")
    elif p.optimizer is None:
        gap = p.optimizer_gap
        cell.parts.append(gap if gap.text.startswith("no optimizer writes") else
                          dataclasses.replace(gap, text="_AdamW keeps both moments in each weight's dtype"))
    if p.fp8:
        _add_fp8(cell, p, "flag")
    whole = torch_setup(p)  # what the tests build: the whole recipe, torchao's pieces in it
    return Setup("torchao", tuple(cell.parts), whole.spec, cell.cuda)


SETUPS = {"torch": torch_setup, "hf": hf_setup, "lightning": lightning_setup, "torchao": torchao_setup}


def setups(c: DtypeConfig) -> dict[str, Setup]:
    """Library key -> its Setup for ``c``; every one a gap that names them where ``c`` sets fields this
    module does not know."""
    p = plan(c)
    if p.unknown:
        what = ", ".join(p.unknown)
        gap = Part(f"not mapped: {what} is a field benchlib/core/settings.py does not know", "gap",
                   short=f"not mapped ({what})")
        return {lib: Setup(lib, (gap,), {"flags": {}, "code": {}}) for lib in LIBRARIES}
    return {lib: SETUPS[lib](p) for lib in LIBRARIES}


def _word(s: Setup) -> str:
    return ("test on CUDA" if s.needs_cuda else "test") if s.buildable else "docs"


def checked(row: dict[str, Setup], c: Optional[DtypeConfig] = None, short: bool = False) -> str:
    """The "checked" cell: which libraries' setups tests/test_settings.py builds and checks (here, on
    a CPU, or on CUDA only), and the documentation the rest rests on. ``short``: the Markdown's
    words ("test", "test on CUDA", "docs"): the first library's word, then the others' that differ."""
    if c is not None and unknown_fields(c):
        return "not mapped"
    words = {k: _word(s) for k, s in row.items() if s.status != "none"}
    if short:
        first, others = next(iter(words.values()), "-"), {}
        for k, w in words.items():
            if w != first:
                others.setdefault(w, []).append(SHORT_NAMES[k])
        return first + (" (" + "; ".join(f"{', '.join(v)}: {w}" for w, v in others.items()) + ")" if others else "")
    out = []
    leads = {"test": "test: ", "test on CUDA": "test on CUDA: ", "docs": "from the library's documentation: "}
    for w, lead in leads.items():
        keys = [k for k, x in words.items() if x == w]
        if keys:
            out.append(lead + ", ".join(f"[{LIBRARIES[k]}]({DOCS[k]})" if w == "docs" else LIBRARIES[k] for k in keys))
    return "; ".join(out) or "-"


def _configs(configs: Optional[Iterable[DtypeConfig]], roles: Iterable[str]) -> list[DtypeConfig]:
    return [c for c in (REGISTRY.values() if configs is None else configs) if c.role in set(roles)]


def settings_table(configs: Optional[Iterable[DtypeConfig]] = None,
                   roles: Iterable[str] = ("candidate",)) -> "pandas.DataFrame":  # noqa: F821
    """A row per configuration (the registry's candidates by default), a column per library (its
    setup in full) and ``checked``."""
    import pandas as pd
    rows = []
    for c in _configs(configs, roles):
        row = setups(c)
        rows.append({"name": c.name, **{LIBRARIES[k]: s.text() for k, s in row.items()}, "checked": checked(row, c)})
    return pd.DataFrame(rows, columns=["name", *LIBRARIES.values(), "checked"]).set_index("name")


NOTES = (
    "**compile**: every row compiles the model, `model = torch.compile(model)` (Lightning: before `fit`; HF: "
    "`torch_compile=True`){no_compile}.",
    "**optimizer**: where a cell names none, `torch.optim.AdamW(model.parameters(), fused=True)` (HF's default, "
    "`optim=\"adamw_torch_fused\"`). A named one takes `model.parameters()` and, in Lightning, is what "
    "`configure_optimizers` returns; `bnb` is `bitsandbytes`, `_AdamW` is `torchao.optim._AdamW`.",
    "**shorthands**: `bf16`/`fp16`/`fp32` in code are `torch.bfloat16`/`torch.float16`/`torch.float32`; "
    "`autocast(X)` is `with torch.autocast(\"cuda\", dtype=X):` around forward and loss; `GradScaler()` is "
    "`torch.amp.GradScaler(\"cuda\")`; `allow_tf32=X` is `torch.backends.cuda.matmul.allow_tf32 = "
    "torch.backends.cudnn.allow_tf32 = X` (Lightning has no flag for it); static scale S: the loss times S before "
    "backward, the gradients divided by S before the step, no GradScaler (it refuses fp16 gradients; Lightning: "
    "`training_step` returns `loss * S`, divide in `on_before_optimizer_step`).",
    "**`model.body` / `model.head`**: the transformer and its output head (GPT-2: `model.transformer`, "
    "`model.lm_head`). head outside autocast: the forward computes `logits = model.head(h.float())` inside "
    "`with torch.autocast(\"cuda\", enabled=False):`. float8 (R): `torchao.float8.convert_to_float8_training("
    "model.body, config=Float8LinearConfig.from_recipe_name(\"R\"))` (HF: before building the Trainer; "
    "Lightning: in `configure_model`).",
    "**HF, Lightning**: HF has no flag for bf16/fp16 weights: `model.to(bf16)` or `from_pretrained(..., "
    "dtype=torch.bfloat16)`, with `bf16`/`fp16` off; an optimizer no `optim` flag names goes in "
    "`Trainer(optimizers=(opt, None))` (none keeps bitsandbytes' 32-bit moments unpaged). Lightning's "
    "`bf16-true`/`16-true` cast the whole module, the head too: a head in its own dtype takes `32-true` and casts "
    "by hand.",
    "**TF32** is named only where a matmul runs in fp32 (elsewhere it changes nothing). HF turns TF32 on by itself "
    "under `torch_compile=True` unless `tf32=False` is given, and applies `tf32` once per process and value "
    "(transformers' `enable_tf32` is cached): a later `tf32=True` after a `tf32=False` does nothing.",
    "**torchao**: its pieces only (the rest is the plain-PyTorch recipe); -: nothing from torchao.",
)
"""What every row shares, said once under the Markdown table ({no_compile}: rows that do not compile)."""


def settings_markdown(configs: Optional[Iterable[DtypeConfig]] = None, roles: Iterable[str] = ("candidate",)) -> str:
    """The table in short cells (the registry's candidates by default), with what every row shares
    (``NOTES``), the missing pieces its cells name and what "checked" means said once below it."""
    rows = [(c, setups(c)) for c in _configs(configs, roles)]
    head = ["config", *LIBRARIES.values(), "checked"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for c, row in rows:
        cells = [f"`{c.name}`", *(s.markdown() for s in row.values()), checked(row, c, short=True)]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return "\n".join(lines + [""] + _notes(rows))


def _notes(rows: list[tuple[DtypeConfig, dict[str, Setup]]]) -> list[str]:
    eager = ", ".join(f"`{c.name}`" for c, _ in rows if not c.compile)
    notes = [f"- {n.format(no_compile=f', except {eager} (no compile)' if eager else '')}" for n in NOTES]
    said: dict[str, Part] = {}  # each gap's and nearest's short form, and its part in full (the first)
    for p in (p for _, row in rows for s in row.values() for p in s.parts if p.kind in ("gap", "near")):
        said.setdefault(p.short, p)
    gaps = [f"  - {k.removeprefix('no equivalent (')[:-1]}: {p.text}" for k, p in said.items()
            if k.startswith("no equivalent")]
    if gaps:
        notes += ["- **no equivalent (X)**: nothing in that library (for plain PyTorch, nor in bitsandbytes or "
                  "torchao) does X, so it cannot train the config; the cell names only what is missing "
                  "(SR: stochastic rounding):", *gaps]
    near = [f"`{p.text}`: {p.note}" for k, p in said.items() if k.startswith("nearest")]
    notes += [f"- **nearest**: the closest thing there is, and what differs: {'; '.join(near)}."] if near else []
    cuda = dict.fromkeys(s.needs_cuda for _, row in rows for s in row.values() if s.needs_cuda and s.buildable)
    links = ", ".join(f"[{DOC_NAMES[k]}]({url})" for k, url in DOCS.items())
    return notes + [
        "- **checked** (a word in parentheses is for the libraries it names):",
        "  - test: tests/test_settings.py builds the setup on a tiny model on a CPU, steps it and compares the "
        "weights', gradients', matmul outputs' and Adam moments' dtypes, the weights' rounding and the loss scaling "
        "with the config's fields (compile is not run)",
        "  - test on CUDA: the same, run only where CUDA is" + (": " + "; ".join(cuda) if cuda else ""),
        f"  - docs: read in the library's documentation and code: {links}"]


def readme_block(roles: Iterable[str] = ("candidate",)) -> str:
    """What the README holds between ``SETTINGS_MARKERS`` (the candidates, unless ``roles`` says more)."""
    return settings_markdown(roles=roles) + "\n"
