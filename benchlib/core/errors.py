"""The errors a user acts on: each message is one line naming the problem and what to do.

In a notebook (JupyterLab, or papermill running a study) IPython shows an exception's
``_render_traceback_()`` instead of its traceback, so such an error is that one line, not
a screen of library frames above it; papermill's own report then ends with it.
"""
from __future__ import annotations


class UserError(ValueError):
    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]
