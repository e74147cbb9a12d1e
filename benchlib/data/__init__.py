"""Layer 2: the data a run trains and evaluates on.

``synthetic`` generates the embedded corpora whose optimal loss is known; ``tasks`` turns a
run configuration into batches (``load_task_data``), the synthetic ones itself and local files
or hub datasets through ``files`` (local files read line by line by ``checks`` first).
Imports ``core`` only.
"""
