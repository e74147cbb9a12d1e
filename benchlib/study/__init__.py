"""Layer 4: many runs, planned from a study file and executed as notebooks.

``studyfile`` parses params/*.yaml into runs (``executor``: its scheduler section); ``runner``
plans them, knows each one's state on resume and executes one through papermill (torchrun
inside, for multi-process arms) into its record; ``sweep`` is the command that runs them here,
in GPU ``slots``, within a time ``budget``, and ``cluster`` hands them to Slurm or submitit's
local executor; ``pack`` carries a chunk's records between machines; ``notebook`` holds what
the notebooks call; ``html_export`` and ``backfill`` work on finished studies.
Imports every layer below, and ``analysis`` to run the analysis notebooks.
"""
