"""roles/model_sync/tasks/download.yml (issue 41.7): `hf download` ran as one silent no_log task with no limit, so a
gated model, a refused token or a full disk came back censored. It now runs in the background within
model_sync_download_timeout, is polled with a line per poll, and a failure names its cause and the next step.

A fake `docker` on the PATH stands in for the image's `hf` (the real one needs the network); model_check reads the
empty model directory as incomplete, as on a fresh head."""

from __future__ import annotations

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
    assert "still running (job" in out and "FAILED - RETRYING" not in out, out[-3000:]


@pytest.mark.parametrize("body", ["exit 0"])
def test_a_download_that_leaves_the_model_incomplete_is_refused(tmp_path, body):
    rc, out = _run(tmp_path, body)
    assert rc == 2 and "Check that the download is complete" in out, out[-3000:]
