"""What serves one GPU host's limits, around the core path (plan -> execute -> record) and never
imported by it (the core sweep takes it through ``dtype_bench.study.sweep.Host``): ``sweep``
(``dtype-bench sweep`` with the host's options: ``slots``, ``budget``, ``pack``, ``cellrun``),
``pack`` (``dtype-bench pack`` / ``unpack``), ``lab`` (JupyterLab, executed notebooks read-only).
"""
