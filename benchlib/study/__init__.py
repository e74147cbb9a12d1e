"""Layer 4: many runs, planned from a study file and executed as notebooks.

``studyfile`` parses params/*.yaml into runs; ``sweep`` plans, resumes and fault-isolates them
through papermill (or torchrun, for multi-process arms); ``notebook`` holds what the notebooks
call; ``html_export``, ``backfill`` and ``calibration`` work on finished studies.
Imports every layer below, and ``analysis`` to run the analysis notebooks.
"""
