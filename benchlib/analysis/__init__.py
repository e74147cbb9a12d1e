"""Layer 3: from records to answers.

``identity`` (each run named by its configuration's numeric definition), ``gates`` (learned by
gap closed, configs told apart, health per run), ``tables`` (records -> per-config summaries),
``ranks`` (stage 2: ranks and their correlation), ``stats`` (the decision rules and the
resampling: scipy, statsmodels), ``contrasts`` and ``safety`` (each config against its
scenario's reference, paired by seed), ``flips``, ``verdicts`` and ``hypotheses``,
``recommend``, ``charts`` (Altair), ``overview`` (the charts read first), ``placement`` (axis
domains and labels that do not overlap), ``scaling`` (multi-GPU speed-up), ``arms`` (an arm's
cost or gain against a baseline, paired run by run) and ``report`` (the analyze / compare
commands and what notebooks 10 and 11 call: the names below). Reads records only: imports ``core``.
"""

from benchlib.analysis.charts import show
from benchlib.analysis.hypotheses import divergence_table, verdict_markdown, verdict_table
from benchlib.analysis.overview import overview_charts
from benchlib.analysis.report import analyze_study, compare_study, mean_table
from benchlib.analysis.tables import describe_experiment, learned_scenarios, load_study, resolve_study_dir, status_table

__all__ = ["analyze_study", "compare_study", "describe_experiment", "divergence_table", "learned_scenarios", "load_study",
           "mean_table", "overview_charts", "resolve_study_dir", "show", "status_table", "verdict_markdown",
           "verdict_table"]
