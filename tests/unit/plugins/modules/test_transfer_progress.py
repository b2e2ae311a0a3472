"""transfer_progress on a real `dd status=progress` capture (coreutils 9.1) behind image_sync's header."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import parse_progress, progress_header
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import progress_summary
from ansible_collections.sparkfleet.vllm.plugins.modules import transfer_progress

# gzip keeps dd's carriage returns byte for byte (a text fixture would need "\n" line endings)
DD = gzip.decompress((Path(__file__).parent / "fixtures" / "transfer_progress"
                      / "dd-coreutils-9.1-status-progress.txt.gz").read_bytes())
HEADER = progress_header("spark-2", "10.99.1.12", 3000000000, 1, 2)


def running(dd_bytes):
    """The progress file part-way: the header, then dd's output up to (not including) the final line."""
    return HEADER + dd_bytes.decode()


def test_parses_the_last_progress_line_while_dd_runs():
    cut = DD[:DD.index(b"\n")]  # dd has printed 2.76 GB in 5 s and is still going
    state = parse_progress(running(cut))
    assert state == {"name": "spark-2", "ip": "10.99.1.12", "total": 3000000000, "index": 1, "count": 2,
                     "bytes": 2762084352, "seconds": 5.0}
    assert progress_summary(state) == "spark-2 (1/2): 2.8 of 3.0 GB (92%), 552 MB/s, about 0 s left"


def test_the_final_line_is_read_too():
    state = parse_progress(running(DD))
    assert state["bytes"] == 3000000000 and state["seconds"] == 5.73809
    assert progress_summary(state) == "spark-2 (1/2): 3.0 GB sent (image 3.0 GB), loading, 523 MB/s"


def test_header_only_and_a_new_destination_start_from_zero():
    assert progress_summary(parse_progress(HEADER)) == "spark-2 (1/2): 0.0 of 3.0 GB (0%)"
    second = running(DD) + progress_header("spark-3", "10.99.1.13", 3000000000, 2, 2)
    assert (parse_progress(second)["name"], parse_progress(second)["bytes"]) == ("spark-3", 0)
    state = parse_progress(second + DD[:DD.index(b"\r", 1)].decode())  # dd's first report, a second in
    assert (state["name"], state["bytes"], state["seconds"]) == ("spark-3", 208367616, 1.0)
    assert parse_progress("") == {} and progress_summary({}) == "no destination under way"


def test_module_follows_the_job_until_its_result_is_written(run_module, tmp_path):
    progress, job = tmp_path / "progress", tmp_path / "job"
    progress.write_bytes(HEADER.encode() + DD[:DD.index(b"\n")])
    job.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1"}))
    r = run_module(transfer_progress, {"path": str(progress), "job_file": str(job)})
    assert r["finished"] is False and r["changed"] is False
    assert r["summary"].startswith("spark-2 (1/2): 2.8 of 3.0 GB (92%)") and r["bytes"] == 2762084352
    progress.unlink()
    job.write_text(json.dumps({"changed": True, "image_id": "sha256:e"}))
    r = run_module(transfer_progress, {"path": str(progress), "job_file": str(job)})
    assert r["finished"] is True and r["summary"] == "done"


def test_module_before_the_first_destination_and_without_a_job_file(run_module, tmp_path):
    progress, job = tmp_path / "progress", tmp_path / "job"
    job.write_text(json.dumps({"started": 1, "finished": 0}))
    r = run_module(transfer_progress, {"path": str(progress), "job_file": str(job)})
    assert r["finished"] is False and r["summary"] == "no destination under way"
    r = run_module(transfer_progress, {"path": str(progress)}, check_mode=True)
    assert r["finished"] is True and r["summary"] == "done"
