"""Layer 3: from records to answers (reads records only: imports ``core``). ``report`` runs the
analyze / compare commands from ``tables``, ``gates``, ``stats``, ``safety``, ``flips``,
``hypotheses``, ``recommend`` and ``charts``; the names below are what notebooks 10 and 11 call.
"""

from benchlib.analysis.charts import show
from benchlib.analysis.hypotheses import divergence_table, verdict_markdown, verdict_table
from benchlib.analysis.overview import overview_charts
from benchlib.analysis.report import analyze_study, compare_study, mean_table
from benchlib.analysis.tables import describe_experiment, learned_scenarios, load_study, resolve_study_dir, status_table

__all__ = ["analyze_study", "compare_study", "describe_experiment", "divergence_table", "learned_scenarios", "load_study",
           "mean_table", "overview_charts", "resolve_study_dir", "show", "status_table", "verdict_markdown",
           "verdict_table"]
