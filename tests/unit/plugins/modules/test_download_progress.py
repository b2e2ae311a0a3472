# -*- coding: utf-8 -*-
"""download_progress (issue 41 item 7): the bytes of a download in progress, the index's total, and the background
job's status file as ansible-core 2.19.14's async wrapper writes it (captured: fixtures/download_progress, a job
still running and one that ended with rc 1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ansible_collections.sparkfleet.vllm.plugins.modules import download_progress as dp

FIXTURES = Path(__file__).parent / "fixtures" / "download_progress"


def _model(tmp_path):
    model = tmp_path / "m"
    part = model / ".cache" / "huggingface" / "download"
    part.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / dp.INDEX).write_text(json.dumps({"metadata": {"total_size": 10_000_000}, "weight_map": {}}))
    (model / "model-00001-of-00003.safetensors").write_bytes(b"\0" * 4_000_000)
    # hf names a file being written after its metadata file: <name>.<etag>.incomplete (file_download.py)
    (part / "model-00002-of-00003.safetensors.0a1b2c.incomplete").write_bytes(b"\0" * 1_000_000)
    (part / "model-00002-of-00003.safetensors.metadata").write_text("x" * 100)
    return model


def test_counts_finished_and_incomplete_weight_files_only(tmp_path):
    model = _model(tmp_path)
    assert dp.weight_bytes(str(model)) == (5_000_000, 1)
    assert dp.index_total(str(model)) == 10_000_000
    assert dp.summary(5_000_000, 10_000_000, 1, "/m") == "5.0 MB of 10.0 MB (50%) in /m"
    assert dp.summary(119_000_000_000, None, 3, "/m").startswith("119.0 GB so far in /m (3 weight files")


def test_no_index_yet_or_a_bad_one_has_no_total(tmp_path):
    assert dp.index_total(str(tmp_path)) is None
    (tmp_path / dp.INDEX).write_text('{"metadata": {"total_size": "big"}}')
    assert dp.index_total(str(tmp_path)) is None
    (tmp_path / dp.INDEX).write_text("{not json")
    assert dp.index_total(str(tmp_path)) is None


def test_a_running_job_has_not_ended(tmp_path):
    job = tmp_path / "j1"
    shutil.copy(FIXTURES / "async-job-running-core-2.19.14.json", job)
    assert dp.job_result(str(job)) == (False, {})
    job.write_text('{"started": tr')   # being written
    assert dp.job_result(str(job)) == (False, {})


def test_an_ended_job_gives_its_result_and_a_gone_one_says_so(tmp_path):
    job = tmp_path / "j1"
    shutil.copy(FIXTURES / "async-job-ended-rc1-core-2.19.14.json", job)
    ended, result = dp.job_result(str(job))
    assert ended and result["rc"] == 1 and "requires approval" in result["stderr"] and result["stdout"] == "fetched"
    ended, result = dp.job_result(str(tmp_path / "gone"))
    assert ended and result["rc"] is None and "is gone" in result["stderr"]
