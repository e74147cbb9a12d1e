"""dtype-bench: which floating-point setup to train with, measured.

The package computes; notebooks narrate. Entry points:
``benchlib.training.loop.run`` (one run -> record), ``benchlib.core.dtypes.REGISTRY`` (dtype configs as
data), ``benchlib.core.runconfig.RunConfig`` (the one typed run configuration).
"""
import logging as _logging

__version__ = "0.1.0"

# transformers imports torchao when it is installed; torchao then warns about optional
# compiled kernels for other hardware, and torch about torchao's enum registration. None of
# it concerns dtype-bench, and it would open every executed notebook.
for _name in ("torchao", "torch.utils._pytree"):
    _logging.getLogger(_name).setLevel(_logging.ERROR)

# jsonschema (under altair and nbformat) imports rfc3987_syntax, when installed (JupyterLab's
# environment has it), only to check "iri" string formats, which no chart or notebook schema
# uses; building that package's grammar costs ~1.4 s in every process and kernel of a sweep.
# Unless something imported it already, jsonschema then simply has no "iri" format checker.
import sys as _sys

_sys.modules.setdefault("rfc3987_syntax", None)
