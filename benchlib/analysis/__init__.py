"""Layer 3: from records to answers (reads records only: imports ``core``). ``report`` runs the
analyze / compare commands from ``tables``, ``gates``, ``stats``, ``safety``, ``flips``,
``hypotheses``, ``recommend`` and ``charts``; the names below are what notebooks 10 and 11 call,
imported on first use, so that a GPU host without Altair can still summarise its records.
"""
import importlib

_HOME = {"answer_for": "findings", "show": "charts", "divergence_table": "hypotheses", "verdict_markdown": "hypotheses",
         "verdict_table": "hypotheses", "overview_charts": "overview", "analyze_study": "report",
         "compare_study": "report", "mean_table": "report", "describe_experiment": "tables",
         "learned_scenarios": "tables", "load_study": "tables", "resolve_study_dir": "tables",
         "status_table": "tables"}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'benchlib.analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(f"benchlib.analysis.{_HOME[name]}"), name)
