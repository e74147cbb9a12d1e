"""Layer 2: the data a run trains and evaluates on (``load.load_task_data``).

``synthetic`` generates the corpora whose optimal loss is known and ``embedded`` serves them;
``files`` reads hub data sets and local files (checked line by line by ``checks`` first) and
``registry`` builds local data from Debian's archive; ``tasks`` holds the batch contract.
Imports ``core`` only.
"""
