"""roles/model_sync/tasks/download.yml (issue 41.7): `hf download` ran as one silent no_log task with no limit, so a
gated model, a refused token or a full disk came back censored. It now runs in the background within
model_sync_download_timeout, is polled with a line per poll, and a failure names its cause and the next step.

A fake `docker` on the PATH stands in for the image's `hf` (the real one needs the network); model_check reads the
empty model directory as incomplete, as on a fresh head."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible_collections.sparkfleet.vllm.tests.unit.support.playbook import local_inventory, run_playbook

REPO = Path(__file__).resolve().parents[3]
TOKEN = "hf_FAKEtoken41secret"

GATED = ("Cannot access gated repo for url https://huggingface.co/api/models/org/model.\\n"
         "Repo model org/model is gated. You must be authenticated to access it.")


def _run(tmp_path, docker_body, timeout=20):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text("#!/bin/sh\n" + docker_body + "\n")
    (fake / "docker").chmod(0o755)
    model = tmp_path / "models" / "org-model"
    model.mkdir(parents=True)
    (tmp_path / "play.yml").write_text("""
- name: Download
  hosts: localhost
  gather_facts: false
  environment:
    PATH: "%(fake)s:{{ lookup('ansible.builtin.env', 'PATH') }}"
  vars:
    model_sync_src: %(model)s
    model_sync_model_id: org/model
    model_sync_image: img:1
    model_sync_hf_token: %(token)s
    model_sync_download_timeout: %(timeout)d
    model_sync_download_poll: 1
  tasks:
    - name: Download
      ansible.builtin.include_tasks: %(tasks)s
""" % {"fake": fake, "model": model, "token": TOKEN, "timeout": timeout,
       "tasks": REPO / "roles" / "model_sync" / "tasks" / "download.yml"})
    p = run_playbook("play.yml", "-v", inventory=local_inventory(tmp_path / "hosts.yml"), cwd=tmp_path,
                     report_dir=tmp_path / "r")
    return p.returncode, p.stdout + p.stderr


def test_a_gated_model_is_named_with_the_fix_and_the_token_stays_hidden(tmp_path):
    # The fake prints its arguments and whether it got the token (never the token: hf does not print it either).
    rc, out = _run(tmp_path, 'echo "docker $*" >&2; [ -n "$HF_TOKEN" ] && echo "HF_TOKEN is set" >&2; '
                             'printf "%s\\n" >&2; exit 1' % GATED)
    flat = " ".join(out.split())
    assert rc == 2, out[-3000:]
    assert "hf download of org/model into" in flat and "the model is gated and this token has no access" in flat
    assert "Next step: accept the model's licence on huggingface.co" in flat, flat[-3000:]
    assert TOKEN not in out, "the token reached the output (argv or a result)"
    assert "HF_TOKEN is set" in out and "HF_HUB_DISABLE_PROGRESS_BARS=1" in out


def test_a_download_that_does_not_end_is_stopped_and_polled_aloud(tmp_path):
    rc, out = _run(tmp_path, "sleep 60", timeout=3)
    flat = " ".join(out.split())
    assert rc == 2, out[-3000:]
    assert "it did not end within model_sync_download_timeout (3 s)" in flat, flat[-3000:]
    assert "raise model_sync_download_timeout" in flat
    # a line per poll from the wait itself (plugins/action/download_progress.py), no retry line
    # (3 + 120) / 1 + 1 polls at most: the job's own limit is the timeout plus 120 s
    polls = re.findall(r"\] localhost - (?:ended \(rc 124\): )?0\.0 MB so far in \S+org-model \(0 weight files; the "
                       r"total comes with the model's index\)(?:, nothing new since the first poll)? \(poll (\d+) of 124\)", out)
    assert polls and polls == [str(n) for n in range(1, len(polls) + 1)], out[-3000:]
    assert "ended (rc 124)" in out
    assert "FAILED - RETRYING" not in out, out[-3000:]


def test_each_poll_shows_the_bytes_of_the_index_total_the_rate_and_the_time_left(tmp_path):
    """The fake hf writes the index first (its total: 4 MB), then a shard 0.5 MB a second, as hf's .incomplete file."""
    model = tmp_path / "models" / "org-model"
    part = model / ".cache" / "huggingface" / "download" / "model-00001-of-00001.safetensors.e7a9.incomplete"
    rc, out = _run(tmp_path, """mkdir -p %(dir)s
echo '{"metadata": {"total_size": 4000000}, "weight_map": {}}' > %(model)s/model.safetensors.index.json
for i in 1 2 3 4 5 6 7 8; do head -c 500000 /dev/zero >> %(part)s; sleep 1; done
mv %(part)s %(model)s/model-00001-of-00001.safetensors""" % {"dir": part.parent, "model": model, "part": part})
    lines = [ln for ln in out.splitlines() if re.search(r"\] localhost - .*\(poll \d+ of \d+\)$", ln)]
    assert len(lines) >= 3, out[-3000:]
    assert re.search(r"\d\.\d MB of 4\.0 MB \(\d+%\) in \S+org-model, [\d.]+ MB/s, ETA \d+ s", "\n".join(lines)), lines
    assert "ended (rc 0): 4.0 MB of 4.0 MB (100%)" in lines[-1], lines
    # the model has one shard and no safetensors header: model_check calls it incomplete, as it is
    assert rc == 2 and "Check that the download is complete" in out


@pytest.mark.parametrize("body", ["exit 0"])
def test_a_download_that_leaves_the_model_incomplete_is_refused(tmp_path, body):
    rc, out = _run(tmp_path, body)
    assert rc == 2 and "Check that the download is complete" in out, out[-3000:]
