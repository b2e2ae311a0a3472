"""The lab runs the Sparks' Ray (issue 39, item 1): one version, lab/ray-version (2.53.0, vLLM 0.17.1's image), in the
runtime image every node's Ray unit runs and in the shared Ray venv the Ray tests start, and nothing of another version
is reused in their place.

Run as root: SPARKLAB_NAME=x SPARKLAB_KEEP_LAB=1 lab/labctl ctl -- .venv/bin/pytest tests/integration/test_lab_ray_version.py -m lab
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
SPARKS_RAY = "2.53.0"      # the Ray of the Sparks' image (DOMAIN 9: hellohal2064/vllm-qwen3.5-gb10, vLLM 0.17.1)


def test_the_lab_s_ray_is_the_sparks_image_s_everywhere(lab, serving):
    version = (REPO / "lab" / "ray-version").read_text().strip()
    assert version == SPARKS_RAY
    for host in lab.hosts:
        running = lab.host_exec(host, "docker", "exec", "sparkfleet-ray", "ray", "--version").stdout
        assert running.split()[-1] == version, (host, running)
        bare = lab.host_exec(host, "docker", "exec", "sparkfleet-ray", "python3", "-c",
                             "import ray; print(ray.__version__)").stdout.strip()
        assert bare == version, (host, bare)
    # the shared venv the Ray tests start (lab/build-rayvenv.sh), at the path that carries the version, read on a host
    venv = subprocess.run([str(REPO / "lab" / "build-rayvenv.sh"), "--print"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert venv.endswith("/rayvenv-%s" % version)
    seen = lab.host_exec(lab.hosts[-1], venv + "/bin/python", "-c", "import ray; print(ray.__version__)")
    assert seen.stdout.strip() == version, seen.stderr[-500:]


def test_the_runtime_image_is_keyed_by_the_ray_version():
    """Another Ray version names another image (the venv layer's hash carries it): a cached 2.60 image is never reused
    as 2.53. `--print` builds nothing."""
    def tag(env_version=None):
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        if env_version:
            env["SPARKLAB_RAY_VERSION"] = env_version
        return subprocess.run([str(REPO / "lab" / "runtime" / "build.sh"), "--print"], capture_output=True, text=True,
                              check=True, env=env).stdout.strip()
    assert tag() == tag(SPARKS_RAY) != tag("2.60.0")
    bad = subprocess.run([str(REPO / "lab" / "runtime" / "build.sh"), "--print"], capture_output=True, text=True,
                         check=False, env={"PATH": "/usr/bin:/bin", "SPARKLAB_RAY_VERSION": "latest"})
    assert bad.returncode == 2 and "bad Ray version 'latest'" in bad.stderr
