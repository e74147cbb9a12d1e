"""The six scenarios of seed 002 (A-F): architecture x task x loss x data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from benchlib.core.dtypes import UnknownNameError, closest

Arch = Literal["gpt2", "roberta"]
Task = Literal["clm", "mlm", "multilabel", "singlelabel"]


@dataclass(frozen=True)
class Scenario:
    id: str
    arch: Arch
    task: Task
    loss: str
    data: str
    quality: str
    """The headline quality metric (seed 000's `quality` column)."""
    higher_is_better: bool

    @property
    def is_lm(self) -> bool:
        return self.task in ("clm", "mlm")

    @property
    def unit(self) -> str:
        """Throughput unit: tokens for LM (seed 001), samples for classification."""
        return "tokens" if self.is_lm else "samples"


SCENARIOS: dict[str, Scenario] = {s.id: s for s in [
    Scenario("A", "gpt2", "clm", "cross_entropy", "openwebtext", "val_loss", False),
    Scenario("B", "roberta", "mlm", "cross_entropy", "openwebtext", "val_loss", False),
    Scenario("C", "gpt2", "multilabel", "bce_with_logits", "eurlex", "micro_f1", True),
    Scenario("D", "roberta", "multilabel", "bce_with_logits", "eurlex", "micro_f1", True),
    Scenario("E", "gpt2", "singlelabel", "cross_entropy", "eurlex", "accuracy", True),
    Scenario("F", "roberta", "singlelabel", "cross_entropy", "eurlex", "accuracy", True),
]}

DATASETS: dict[str, tuple[str, ...]] = {
    "openwebtext": ("clm", "mlm"),
    "eurlex": ("multilabel", "singlelabel"),
    "ag_news": ("singlelabel",),
    "imdb": ("singlelabel",),
}
"""Hub data sets a run can name (``data: ag_news``) and the tasks each can serve; ``data: hub``
is the scenario's own (``Scenario.data``). AG News (one of 4 topics per article) and IMDB (one
of 2 sentiments per review) have one label per text, so they serve single-label scenarios only."""


def dataset_problem(name: str, scn: Scenario) -> str | None:
    """Why the named data set cannot feed scenario ``scn`` (one line), or None."""
    tasks = DATASETS[name]
    if scn.task in tasks:
        return None
    fits = ", ".join(s.id for s in SCENARIOS.values() if s.task in tasks)
    kind = "single-label" if tasks == ("singlelabel",) else " / ".join(tasks)
    return (f"data={name!r} is {kind} data, scenario {scn.id} is {scn.task}: run {name} with scenario {fits}, "
            f"or give scenario {scn.id} data='{scn.data}'")


# seed 002's CLI vocabulary: --model_arch X --task Y
TASK_ALIASES = {"clm": "clm", "causal_lm": "clm", "mlm": "mlm", "masked_lm": "mlm",
                "multilabel": "multilabel", "multi_label": "multilabel", "cls_multi": "multilabel",
                "singlelabel": "singlelabel", "single_label": "singlelabel", "cls": "singlelabel",
                "cls_single": "singlelabel"}


def get_scenario(sid: str) -> Scenario:
    key = str(sid).upper()
    if key not in SCENARIOS:
        raise UnknownNameError(f"unknown scenario {sid!r}.{closest(str(sid), list(SCENARIOS))} "
                               f"Valid: {', '.join(SCENARIOS)}")
    return SCENARIOS[key]


def scenario_for(arch: str, task: str) -> Scenario:
    t = TASK_ALIASES.get(task)
    if t is None:
        raise UnknownNameError(f"unknown task {task!r}.{closest(task, list(TASK_ALIASES))} "
                               f"Valid: {', '.join(TASK_ALIASES)}")
    for s in SCENARIOS.values():
        if s.arch == arch and s.task == t:
            return s
    raise UnknownNameError(f"unknown model_arch {arch!r}. Valid: gpt2, roberta")
