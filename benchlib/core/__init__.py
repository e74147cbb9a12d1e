"""Layer 1, the ground: what a run is and what it leaves behind.

Dtype configurations as data (``dtypes``), the scenarios A-F (``scenarios``), the model sizes
and their default batches (``sizes``), the one typed run
configuration (``runconfig``), the result record's contract (``records``), the environment a
record states (``env``), and the measurement primitives every layer above shares: the step
timer with its window aggregation (``timing``) and the per-step log (``steplog``).
Imports nothing else from benchlib.
"""
