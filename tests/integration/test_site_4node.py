"""site.yml on a 4-node lab (TP=4): a second, independent lab instance beside the shared one.

Marked `long` (about 7 minutes: a second lab, a full deployment to four nodes and a re-run): CI's budget leaves it to
scripts/faults.sh, which runs every `long` test; on its own: scripts/faults.sh -k four_nodes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.long]

REPO = Path(__file__).resolve().parents[2]
LABCTL = REPO / "lab" / "labctl"
NAME = "x4"
STATE = Path("/var/tmp/sparklab/lab-" + NAME)
HOSTS = ["spark-%d" % i for i in range(1, 5)]
API_KEY_FILE = "/var/tmp/sparklab/lab/api-key"


def run(argv, timeout=900):
    env = dict(os.environ, SPARKLAB_NAME=NAME, PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")))
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(REPO), check=False)


@pytest.fixture(scope="module")
def lab4(lab):  # the shared lab fixture only checks that a lab can be built here
    up = run([LABCTL, "up", "--hosts", "4"])
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        staged = run([REPO / "lab" / "stage.sh"])
        assert staged.returncode == 0, staged.stderr[-3000:]
        yield
    finally:
        if not os.environ.get("SPARKLAB_KEEP_LAB"):
            run([LABCTL, "down"], timeout=300)


def playbook(*args):
    return run([LABCTL, "ctl", "--", REPO / ".venv" / "bin" / "ansible-playbook", "-i", STATE / "inventory", *args],
               timeout=1800)


def test_four_nodes_deploy_serve_and_rerun_unchanged(lab4):
    first = playbook("site.yml")
    assert first.returncode == 0, first.stdout[-4000:]
    # Ray holds all four nodes on their fabric IPs, proven by object round trips with every worker.
    assert "4 alive Ray node(s) with 4 GPU(s), 4/4 expected on their fabric IP" in first.stdout
    assert "round trips ok for 3/3 worker(s)" in first.stdout

    # The model reached every worker (the sync fans out: a finished worker feeds the next). model_sync's marker,
    # .sparkfleet-model, is on the workers only.
    listings = {}
    for host in HOSTS:
        p = run([LABCTL, "exec", host, "sh", "-c",
                 "cd /models/sparklab-tiny && find . -type f ! -path ./.sparkfleet-model -printf '%p %s\\n' | sort"])
        listings[host] = p.stdout
    assert "model.safetensors.index.json" in listings["spark-1"]
    assert all(listings[h] == listings["spark-1"] for h in HOSTS[1:])

    # A real completion from the controller's side, served by four ranks.
    key = open(API_KEY_FILE).read().strip()
    body = json.dumps({"model": "sparklab/tiny-moe", "prompt": "four nodes", "max_tokens": 4})
    p = run([LABCTL, "ctl", "--", "curl", "-sS", "-m", "60", "-H", "Authorization: Bearer " + key,
             "-H", "Content-Type: application/json", "-d", body, "http://10.99.0.11:30000/v1/completions"])
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["usage"]["completion_tokens"] == 4 and out["choices"][0]["text"].strip()

    second = playbook("site.yml")
    assert second.returncode == 0, second.stdout[-4000:]
    recap = [ln for ln in second.stdout.splitlines() if ln.startswith("spark-") and "changed=" in ln]
    assert len(recap) == 4 and all("changed=0" in ln for ln in recap), recap
