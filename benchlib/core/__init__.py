"""Layer 1, the ground: what a run is and what it leaves behind.

Dtype configurations (``dtypes``), scenarios A-F (``scenarios``), model sizes (``sizes``), the
typed run configuration (``runconfig``), the result record (``records``), the environment a
record states (``env``), and the measurement primitives every layer shares (``timing``,
``steplog``). Imports nothing else from benchlib.
"""
