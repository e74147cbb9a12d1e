"""dtype-bench: which floating-point setup to train with, measured.

The package computes; notebooks narrate. Entry points:
``benchlib.train.run`` (one run -> record), ``benchlib.configs.REGISTRY`` (dtype configs as
data), ``benchlib.runconfig.RunConfig`` (the one typed run configuration).
"""
__version__ = "0.1.0"
