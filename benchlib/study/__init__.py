"""Layer 4: many runs, planned from a study file and executed as notebooks.

``studyfile`` parses params/*.yaml into runs (``executor``: its scheduler section); ``runner``
plans them, knows each one's state on resume and executes one through papermill (torchrun
inside, for multi-process arms) into its record; ``sweep`` runs them here (a host's additions
come in through ``sweep.Host``: ``benchlib.host``), ``cluster`` through Slurm or submitit's local
executor; ``notebook`` holds what the notebooks call; ``html_export`` and ``compact`` work on
finished studies.
Imports every layer below, and ``analysis`` to run the analysis notebooks.
"""
