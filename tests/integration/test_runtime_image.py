"""The runtime image on the lab as on real Sparks: only the head has it (workers cannot pull), its entrypoint is
`vllm serve` (vllm/vllm-openai's), and an image too old for the model is stopped before anything changes.

Run as root: lab/labctl ctl -- .venv/bin/pytest tests/integration/test_runtime_image.py -m lab
"""

from __future__ import annotations

import time

import pytest

# The tests stop our units on the workers, take the image off them and deploy another image or none.
pytestmark = [pytest.mark.lab, pytest.mark.leaves("anything")]

HEAD = "spark-1"
OLD = "0.10.2"


def image_id(lab, host, image):
    p = lab.host_exec(host, "docker", "image", "inspect", "--format", "{{.Id}}", image)
    return p.stdout.strip() if p.returncode == 0 else None


@pytest.fixture(scope="module")
def image(lab, serving):
    """The runtime image, and the same image playing vLLM OLD, on the head of a lab that runs our deployment (the
    tests compare what it runs before and after a refused run; staging leaves the operators' old stack stopped)."""
    return lab.stage("--release", OLD)


@pytest.mark.fault(name='image too old for the model (vLLM 0.10.2, no Qwen3.5)',
                   expected='site.yml stops in seconds naming image, versions and fix; nothing changed')
def test_too_old_image_stops_the_deployment_in_seconds_before_anything_changes(lab, image, tmp_path):
    old = "%s-vllm%s" % (image, OLD)
    # settled first: an engine still starting after the test before (its memory gate, its GPU wait) is no change of
    # this run's (CI on 5c1f3d4: vLLM 'activating start-pre' before, 'active running' after)
    deadline = time.monotonic() + 300
    while lab.systemctl(HEAD, "show", "-p", "ActiveState", "--value", "sparkfleet-vllm") in ("activating", "reloading") \
            and time.monotonic() < deadline:
        time.sleep(3)
    before = {h: lab.services(h) for h in lab.hosts}
    r, failures = lab.play(tmp_path, "site.yml", extravars={"sparkfleet_image": old})
    assert r["status"] == "failed" and failures, r["stats"]
    res = failures[0]["res"]
    assert failures[0]["host"] == HEAD
    assert res["image"] == old and res["vllm_version"] == OLD and res["ray_version"]
    assert res["msg"].startswith("image %s (vLLM %s, Ray %s," % (old, OLD, res["ray_version"]))
    assert "['Qwen3_5MoeForConditionalGeneration'] are not in this vLLM's registry" in res["msg"]
    assert "does not accept --safetensors-load-strategy" in res["msg"]
    assert res["hint"].startswith("Set sparkfleet_image (vllm_serve_image for the server alone) to an image")
    assert lab.changed_total(r) == 0, r["stats"]
    assert {h: lab.services(h) for h in lab.hosts} == before


def test_entrypoint_is_vllm_serve_so_every_container_needs_one(lab, image):
    p = lab.host_exec(HEAD, "docker", "image", "inspect", "--format", "{{json .Config.Entrypoint}}", image)
    assert p.stdout.strip() == '["vllm","serve"]'
    wrong = lab.host_exec(HEAD, "docker", "run", "--rm", "--network", "none", image, "ray", "start", "--head")
    assert wrong.returncode == 2 and "vllm: error: unrecognized arguments: start" in wrong.stderr
    right = lab.host_exec(HEAD, "docker", "run", "--rm", "--network", "none", "--entrypoint", "ray", image,
                          "--version")
    assert right.returncode == 0 and "ray, version" in right.stdout


# CI's first deployment (from the old stack, the image taken off the workers) moves the image the same way, and
# test_security checks that no worker keeps the image key; this one's two runs (~100 s of CI) are long.
@pytest.mark.long
@pytest.mark.fault(name='worker with no route to a registry',
                   expected='the head moves the image over the fabric; second run unchanged')
def test_workers_cannot_pull_and_get_the_image_from_the_head_over_the_fabric(lab, image, tmp_path):
    workers = lab.hosts[1:]
    for w in workers:
        pull = lab.host_exec(w, "docker", "pull", image, timeout=60)
        assert pull.returncode != 0
        # a deployment still running from the image keeps its container; the tag goes, so the head must send it
        lab.sh(w, "systemctl stop sparkfleet-vllm sparkfleet-ray 2>/dev/null; docker image rm -f %s" % image)
        assert image_id(lab, w, image) is None
    head_id = image_id(lab, HEAD, image)

    r, failures = lab.play(tmp_path / "first", "playbooks/runtime_image.yml")
    assert r["status"] == "successful" and not failures, failures[-3:]
    sync = transfer(r)
    assert sync["changed"] is True and sync["image_id"] == head_id
    assert [x["name"] for x in sync["results"] if x["changed"]] == workers
    assert all(x["bytes"] > 500e6 and x["seconds"] > 0 for x in sync["results"])
    for w in workers:
        assert image_id(lab, w, image) == head_id
        assert not image_key(lab, w), "the image key outlived the transfer"
    # while it was there, the key could load this image only: its forced command checked what it loaded
    assert all(x["loaded"]["tags"] == [image] for x in sync["results"])
    assert all(lab.sh(w, "test -s /usr/local/sbin/sparkfleet-image-load && echo ok").stdout.strip() == "ok"
               for w in workers)

    again, failures = lab.play(tmp_path / "again", "playbooks/runtime_image.yml")
    assert again["status"] == "successful" and not failures
    assert lab.changed_total(again) == 0, again["stats"]


def transfer(r):
    sync = [e["res"] for e in r["events"] if e["host"] == HEAD and "bytes_transferred" in (e["res"] or {})]
    assert len(sync) == 1, sync
    return sync[0]


def image_key(lab, host):
    return lab.sh(host, "grep 'sparkfleet image sync$' ~spark/.ssh/authorized_keys || true").stdout.strip()


@pytest.mark.long
@pytest.mark.fault(name="worker on Docker's containerd image store (a loaded image gets another ID)",
                   expected="the image moves once, the second run reports changed=0; the key is gone after the run")
def test_a_containerd_image_store_worker_gets_the_image_once(lab, image, tmp_path):
    worker = lab.hosts[1]
    lab.labctl("break", "containerd-store", worker)
    try:
        assert "io.containerd.snapshotter" in lab.sh(worker, "docker info --format '{{json .DriverStatus}}'").stdout
        # the containerd store keeps what an earlier break loaded: the worker must lack the image, as on a fresh node
        lab.sh(worker, "docker image rm -f %s 2>/dev/null; true" % image)
        assert image_id(lab, worker, image) is None
        head_id = image_id(lab, HEAD, image)
        r, failures = lab.play(tmp_path / "first", "playbooks/runtime_image.yml")
        assert r["status"] == "successful" and not failures, lab.messages(failures)
        sync = transfer(r)
        assert [x["name"] for x in sync["results"] if x["changed"]] == [worker]
        # moby #44833: the worker's daemon names the loaded image by its manifest digest, not the head's config digest
        worker_id = image_id(lab, worker, image)
        assert worker_id and worker_id != head_id
        assert not image_key(lab, worker)

        again, failures = lab.play(tmp_path / "again", "playbooks/runtime_image.yml")
        assert again["status"] == "successful" and not failures, lab.messages(failures)
        assert lab.changed_total(again) == 0, again["stats"]
        assert not [e for e in again["events"] if e["host"] == HEAD and "bytes_transferred" in (e["res"] or {})]
    finally:
        lab.labctl("fix", "containerd-store", worker)


@pytest.mark.long
@pytest.mark.fault(name="head and worker on Docker 28 (Debian sid's 28.5.2, API 1.51) with the containerd image store",
                   expected="the head saves with `docker save --platform linux/amd64` (API >= 1.48), the worker gets the"
                            " image once, the second run reports changed=0")
def test_a_docker_28_head_saves_one_platform(lab, image, tmp_path):
    worker = lab.hosts[1]
    try:
        for h in (HEAD, worker):
            lab.labctl("break", "docker28", h)
            assert lab.sh(h, "docker version --format '{{.Server.Version}} {{.Server.APIVersion}}'").stdout.startswith(
                "28."), h
            lab.sh(h, "docker image rm -f %s 2>/dev/null; true" % image)
        # the containerd store does not see what the classic one held: the head gets the image as stage.sh gives it
        tar = "/var/tmp/sparklab/share/sparklab-vllm-runtime-%s.tar" % image.split(":", 1)[1]
        imported = lab.host_exec(HEAD, "docker", "import", "--change",
                                 "ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                 "--change", 'ENTRYPOINT ["vllm", "serve"]', tar, image, timeout=600)
        assert imported.returncode == 0, imported.stderr
        assert image_id(lab, worker, image) is None
        r, failures = lab.play(tmp_path / "first", "playbooks/runtime_image.yml")
        assert r["status"] == "successful" and not failures, lab.messages(failures)
        sync = transfer(r)
        assert sync["save_args"] == ["--platform", "linux/amd64"], sync["save_args"]
        assert [x["name"] for x in sync["results"] if x["changed"]] == [worker]
        assert image_id(lab, worker, image)
        again, failures = lab.play(tmp_path / "again", "playbooks/runtime_image.yml")
        assert again["status"] == "successful" and not failures, lab.messages(failures)
        assert lab.changed_total(again) == 0, again["stats"]
    finally:
        for h in (HEAD, worker):
            lab.labctl("fix", "docker28", h, check=False)


def test_model_download_runs_hf_in_the_image_once_the_image_is_on_the_head(lab, image, tmp_path):
    model = "/models/sparklab-tiny"
    for h in lab.hosts:
        lab.sh(h, "systemctl stop sparkfleet-vllm 2>/dev/null; rm -rf %s" % model)
    # preflight and the image plays run with any tag: the image is on the head before model_sync downloads
    r, failures = lab.play(tmp_path, "site.yml", extravars={"model_sync_download": True}, cmdline="--tags model_sync")
    assert r["status"] == "successful" and not failures, failures[-3:]
    for h in lab.hosts:
        cfg = lab.sh(h, "cat %s/config.json" % model).stdout
        assert '"Qwen3_5MoeForConditionalGeneration"' in cfg, (h, cfg[:200])


@pytest.mark.fault(name="image whose PATH python is not vLLM's (a system python without Ray first on PATH)",
                   expected="the image check asks vLLM's own interpreter (vLLM and Ray found) and every other one our"
                            " scripts run there: it fails naming python3 on the image's PATH, that it cannot import"
                            " ray, and the GPU wait, Ray guard and watchdog that run it")
def test_the_image_check_asks_every_interpreter_our_scripts_run(lab, image, tmp_path, observe):
    lab.labctl("break", "path-python", HEAD)
    try:
        odd = image + "-pathpython"
        path_python = lab.host_exec(HEAD, "docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", odd,
                                    "-c", "command -v python3; head -1 $(command -v vllm)")
        assert path_python.stdout.split() == ["/usr/bin/python3", "#!/opt/venv/bin/python3"]
        # what the deployment would run there: the GPU wait's and the Ray guard's `docker exec ... python3 -c 'import
        # ray'` fails in this image, though vLLM's own interpreter has Ray
        no_ray = lab.host_exec(HEAD, "docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", odd,
                               "-c", "import ray")
        assert no_ray.returncode != 0 and "No module named 'ray'" in no_ray.stderr, no_ray.stderr
        r, failures = lab.play(tmp_path, "tests/integration/playbooks/image_check.yml",
                               extravars={"sparkfleet_image": odd})
        assert r["status"] == "failed" and failures, r["status"]
        res = failures[0]["res"]
        assert (res["vllm_version"], res["python"], res["vllm_entrypoint"]) == (
            "0.17.1", "/opt/venv/bin/python3", "/opt/venv/bin/vllm")
        assert res["ray_version"], res
        (problem,) = res["problems"]
        assert problem.startswith("python3 on the image's PATH (/usr/bin/python3, Python 3.11.2) cannot import ray"), \
            problem
        assert "sparkfleet-wait gpus" in problem and "sparkfleet-ray-guard" in problem and "watchdog" in problem
        by_use = dict((i["use"], i) for i in res["interpreters"])
        assert by_use["ray"]["interpreter"] == "/opt/venv/bin/python3" and by_use["ray"]["missing"] == {}
        observe(res["msg"][:300])
        # the runtime image itself passes: each interpreter imports what it needs
        r, failures = lab.play(tmp_path / "fits", "tests/integration/playbooks/image_check.yml",
                               extravars={"sparkfleet_image": image})
        assert r["status"] == "successful" and not failures, lab.messages(failures)
    finally:
        lab.labctl("fix", "path-python", HEAD)
