"""JupyterLab's contents manager keeps executed notebooks as the study wrote them."""
import asyncio
import json

import pytest
from tornado import web

from dtype_bench.host.lab import ExecutedReadOnly, read_only

NB = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_only_files_inside_an_executed_folder_are_read_only():
    assert read_only("executed/h200/quick/runs/A/amp_bf16/seed0.ipynb")
    assert read_only("/dtype-bench/executed/x.ipynb")   # a server started above the repository
    assert not read_only("notebooks/01_train_lm.ipynb")
    assert not read_only("executed")                     # the folder itself: new studies go there
    assert not read_only("notes/executed_by_hand.ipynb")


def test_executed_notebooks_are_served_read_only_and_refuse_saves(tmp_path):
    (tmp_path / "executed").mkdir()
    (tmp_path / "notebooks").mkdir()
    for p in ("executed/run.ipynb", "notebooks/train.ipynb"):
        (tmp_path / p).write_text(json.dumps(NB))
    cm = ExecutedReadOnly(root_dir=str(tmp_path))

    async def scenario():
        assert (await cm.get("executed/run.ipynb"))["writable"] is False   # JupyterLab then never autosaves it
        source = await cm.get("notebooks/train.ipynb")
        assert source["writable"] is True
        await cm.save({"type": "notebook", "content": source["content"]}, "notebooks/train.ipynb")  # still saves
        with pytest.raises(web.HTTPError) as e:
            await cm.save({"type": "notebook", "content": NB}, "executed/run.ipynb")
        assert e.value.status_code == 403 and "Save As" in e.value.log_message

    asyncio.run(scenario())
    assert json.loads((tmp_path / "executed/run.ipynb").read_text()) == NB
