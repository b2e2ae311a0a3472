"""The model download on the lab (issue 41 items 7 and 14): `hf download` of the image's stand-in (its failure knob,
lab/standin/sparklab_vllm/hf.py, prints huggingface_hub 1.x's own texts) in the background, followed by
download_progress a line per poll, and a failure named with its cause and the next step. Each test downloads into a
directory of its own (sparkfleet_model_dir set for the run), so the served model is not touched. The download's task
file runs alone (tests/integration/playbooks/model_download.yml): site.yml --tags model_sync runs the same tasks after
preflight and the image plays, which add minutes and nothing a failed download reaches."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

# hf runs in the runtime image on the head.
pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("staged")]

HEAD = "spark-1"
KNOB = "/models/.sparklab-hf-fail"   # the stand-in reads it in the directory above --local-dir (the role mounts it)
POLL = re.compile(r"^  \[\d\d:\d\d:\d\d\] spark-1 - (.*) \(poll (\d+) of (\d+)\)$", re.M)


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _stdout(data_dir):
    """What ansible-runner's stdout (as AWX shows it) said in this run, without its colours."""
    return ANSI.sub("", "\n".join(p.read_text(errors="replace") for p in Path(data_dir).glob("artifacts/*/stdout")))


def _download(lab, tmp_path, target, knob, **extra):
    lab.sh(HEAD, "rm -rf %s; printf '%%s\\n' %s > %s" % (target, " ".join(knob), KNOB))
    extravars = dict({"model_sync_download": True, "sparkfleet_model_dir": target,
                      "sparkfleet_model_id": "sparklab/gated-moe"}, **extra)
    return lab.play(tmp_path, "tests/integration/playbooks/model_download.yml", extravars=extravars)


def _clean(lab, target):
    # a stand-in still writing (the docker client was stopped) ends within its shards' delay
    for _ in range(20):
        if "hf" not in lab.sh(HEAD, "docker ps --format '{{.Command}}'").stdout:
            break
        time.sleep(2)
    lab.sh(HEAD, "rm -f %s; rm -rf %s" % (KNOB, target))


@pytest.mark.fault(name="gated model (hf download refused: the token has no access)",
                   expected="model_sync fails on the head naming the cause (the model is gated and this token has no "
                            "access to it), hf's own line (Access denied. Model '...' requires approval.) and the next "
                            "step (accept the licence with the token's account); no FAILED - RETRYING line")
def test_a_gated_model_fails_with_the_named_cause_and_the_next_step(lab, tmp_path, observe):
    target = "/models/sparklab-gated"
    try:
        r, failures = _download(lab, tmp_path, target, ["gated"], model_sync_download_poll=3)
        assert r["status"] == "failed" and failures, r["status"]
        res = failures[-1]["res"]
        flat = " ".join(str(res.get("msg", "")).split())
        assert failures[-1]["host"] == HEAD, failures[-1]
        assert "hf download of sparklab/gated-moe into %s failed: the model is gated and this token has no access to " \
               "it." % target in flat, flat
        assert "Error: Access denied. Model 'sparklab/gated-moe' requires approval." in flat, flat
        assert "Next step: accept the model's licence on huggingface.co" in flat, flat
        observe(flat[:400])
        out = _stdout(tmp_path)
        assert "FAILED - RETRYING" not in out, out[-3000:]
        polls = POLL.findall(out)
        assert polls and polls[-1][0].startswith("ended (rc 1): "), out[-3000:]
        # nothing was written, nothing synced: the download failed before the workers were asked
        assert lab.sh(HEAD, "ls -A %s 2>/dev/null | grep -v '^.cache$' | wc -l" % target).stdout.strip() == "0"
    finally:
        _clean(lab, target)


# CI: the same polls and time limit in tests/unit/roles/test_model_download.py (test_each_poll_shows_the_bytes_of_the_
# index_total_the_rate_and_the_time_left, test_a_download_that_does_not_end_is_stopped_and_polled_aloud); hf in the
# lab's image by the test above: long.
@pytest.mark.long
def test_a_download_shows_its_bytes_per_poll_and_a_time_limit_is_named(lab, tmp_path):
    """The stand-in writes a shard every 4 s (8 shards of 32 MB); the download may take 20 s and is polled every 2 s."""
    target = "/models/sparklab-slow"
    try:
        r, failures = _download(lab, tmp_path, target, ["delay_s=4"], model_sync_download_timeout=20,
                                model_sync_download_poll=2)
        assert r["status"] == "failed" and failures, r["status"]
        flat = " ".join(str(failures[-1]["res"].get("msg", "")).split())
        assert "it did not end within model_sync_download_timeout (20 s)" in flat, flat
        assert "raise model_sync_download_timeout" in flat, flat
        out = _stdout(tmp_path)
        assert "FAILED - RETRYING" not in out, out[-3000:]
        polls = POLL.findall(out)
        assert [int(n) for _s, n, _of in polls] == list(range(1, len(polls) + 1)), polls
        assert {of for _s, _n, of in polls} == {str((20 + 120) // 2 + 1)}, polls   # the old retries + 1
        sizes = [float(m.group(1)) for s, _n, _of in polls for m in [re.search(r"([\d.]+) MB so far in ", s)] if m]
        assert len(sizes) >= 2 and sizes[-1] > sizes[0] and sizes == sorted(sizes), polls
        assert any(re.search(r", [\d.]+ MB/s", s) for s, _n, _of in polls), polls
        assert polls[-1][0].startswith("ended (rc 124): "), polls[-1]
    finally:
        _clean(lab, target)
