"""Layer 3: one run, start to finish. ``loop.run`` refuses what cannot start (``preflight``),
builds the model (``models``, ``checkpoints``), optimizer and precision (``precision``, ``adamw*``,
``fp8``), trains, evaluates (``metrics``, ``baselines``), judges (``health``, ``forensics``) and
writes the record; ``inference`` measures serving precisions. Imports ``core``, ``data``, ``parallel``.
"""
