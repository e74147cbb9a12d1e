"""Layer 3: one run, start to finish.

``loop.run`` refuses at once what cannot start (``preflight``), builds the model (``models``,
``checkpoints``), the optimizer and precision (``precision``, ``adamw``, ``adamw8bit``, ``fp8``), trains,
evaluates (``metrics``, ``baselines``), judges the run (``health``, ``forensics``) and writes
its record. ``bench`` times the step against a bare loop; ``inference`` measures a model served
in each inference precision (``dtype-bench infer``). Imports ``core``, ``data``
and ``parallel``.
"""
