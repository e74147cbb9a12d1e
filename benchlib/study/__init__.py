"""Layer 4: many runs, planned from a study file and executed as notebooks.

``studyfile`` parses params/*.yaml into runs; ``runner`` plans them, knows their state on resume
and executes one into its record; ``sweep`` runs them here (``sweep.Host``: ``benchlib.host``),
``cluster`` through a scheduler; ``notebook`` holds what the notebooks call; ``html_export`` and
``compact`` work on finished studies. Imports every layer below, and ``analysis``.
"""
