"""JupyterLab with executed notebooks read-only (``make lab``).

A committed executed notebook is a result, but JupyterLab autosaves an opened notebook once a
kernel connects, re-serialising it. Its autosave skips documents the server reports as not
writable: this contents manager reports every file under a folder named ``executed`` so and
refuses to save there ("Save As" elsewhere keeps a reader's changes).

    jupyter lab --ServerApp.contents_manager_class=dtype_bench.host.lab.ExecutedReadOnly
"""
from __future__ import annotations

from pathlib import PurePosixPath

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from tornado import web

RESULTS_DIR = "executed"


def read_only(path: str) -> bool:
    """Whether ``path`` (relative to the server's root, '/'-separated) lies in a results folder."""
    return RESULTS_DIR in PurePosixPath(path.strip("/")).parts[:-1]


class ExecutedReadOnly(AsyncLargeFileManager):
    """The server's default contents manager, with ``executed/`` read-only."""

    def _base_model(self, path):
        model = super()._base_model(path)
        if read_only(path):
            model["writable"] = False
        return model

    async def save(self, model, path=""):
        if read_only(path):
            raise web.HTTPError(403, f"{path} is an executed result and stays as the study wrote it: "
                                     f"use Save As to a folder outside {RESULTS_DIR}/")
        return await super().save(model, path)
