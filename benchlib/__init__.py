"""dtype-bench: which floating-point setup to train with, measured.

The package computes; notebooks narrate. Entry points:
``benchlib.train.run`` (one run -> record), ``benchlib.configs.REGISTRY`` (dtype configs as
data), ``benchlib.runconfig.RunConfig`` (the one typed run configuration).
"""
import logging as _logging

__version__ = "0.1.0"

# transformers imports torchao when it is installed; torchao then warns about optional
# compiled kernels for other hardware, and torch about torchao's enum registration. None of
# it concerns dtype-bench, and it would open every executed notebook.
for _name in ("torchao", "torch.utils._pytree"):
    _logging.getLogger(_name).setLevel(_logging.ERROR)
