"""What serves one GPU host's limits, around the core path (plan -> execute -> record) and never
imported by it: the core sweep takes it through its seams (``benchlib.study.sweep.Host``).

- ``sweep``: ``dtype-bench sweep`` with this host's options, each in one place: ``--gpus`` and
  ``--runs-per-gpu`` (runs side by side, ``slots``), ``--time-budget`` (a study in chunks on a
  host whose jobs have a hard limit, ``budget``), ``--pack-to`` (the new records kept as one
  archive while the runs go, ``pack``), ``--compile-cache`` (torch.compile's cache folder);
  a cell's runs without notebooks in one process (``cellrun``). Slurm and submitit's local
  executor are the core sweep's (``--executor``, ``--set``, ``benchlib.study.cluster``).
- ``pack``: ``dtype-bench pack`` / ``unpack``, records carried between machines.
- ``lab``: JupyterLab over the executed notebooks, read-only.
"""
