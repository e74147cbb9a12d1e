"""Layer 2: the data a run trains and evaluates on (``load.load_task_data``).

``synthetic`` generates the corpora whose optimal loss is known and ``embedded`` serves them;
``files`` reads hub data sets and local files (checked line by line by ``checks`` first), local
data built from Debian's archive included (``dtype_bench.build_data`` builds it); ``tasks``
holds the batch contract.
Imports ``core`` only.
"""
