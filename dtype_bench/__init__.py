"""dtype-bench, the tool: the ``dtype-bench`` command, which runs and publishes studies with
``benchlib``, the instrument a notebook imports.

``study`` plans a study file's runs and executes them (papermill, in-process cells, Slurm through
submitit), then compacts, exports and describes the finished study; ``host`` adds what one GPU
host needs (slots, a time budget, packing records to carry home, JupyterLab); ``build_data``
builds local data from Debian and PyPI packages; ``cli`` is the command. Imports point one way:
this package imports ``benchlib``, never the reverse.
"""
