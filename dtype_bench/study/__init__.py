"""Many runs, planned from a study file (``benchlib.study.studyfile``) and executed as notebooks.

``runner`` plans them, knows their state on resume and executes one into its record; ``sweep``
runs them here (``sweep.Host``: ``dtype_bench.host``), ``cluster`` through a scheduler, ``lock``
keeps a second sweep out of a study folder; ``html_export``, ``compact``, ``readme`` and
``rejudge`` work on finished studies.
"""
