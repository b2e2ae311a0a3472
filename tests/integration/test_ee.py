"""The execution environment built for real, inside a lab host (docker is there), and asked for the collection
(issue 19.5): `ansible-doc -l sparkfleet.vllm` runs in the built image.

What is built, exactly: the repository's execution-environment.yml, through `ansible-builder create` (on the
controller) and the container build that `ansible-builder build` runs (`docker build` of the generated Containerfile
in spark-1), with the build arguments a user passes (SPARKFLEET_VERSION). Lab hosts have no registry, so two things
differ from a user's build, both given as build arguments and nothing else: the base image is made offline in the lab
(EE_BASE_IMAGE: the lab's Debian bookworm host rootfs, plus python3.11-venv's files, i.e. ensurepip and its
wheels, taken from the lab runtime image's base; pip reads a wheelhouse made on the controller from pip's configured
index instead of PyPI) instead of the pinned CentOS Stream 9; its Python is a venv of Debian's python3.11 at
/opt/py (PYCMD), because Debian refuses ensurepip for the system Python and ansible-builder's pip step runs it; and
the package manager is apt-get (PKGMGR) instead of dnf. Everything else (Python 3.11, ansible-core and ansible-runner at their pins, matplotlib, bindep's SSH client,
the collection installed from the built tarball, the step that refuses a missing tarball) runs as in a user's build.

Long (a wheelhouse and two image builds: 5-15 minutes on the loaded machine): scripts/faults.sh runs it.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

pytestmark = [pytest.mark.lab, pytest.mark.long]

HOST = "spark-1"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
GALAXY = yaml.safe_load(open(os.path.join(REPO, "galaxy.yml"), encoding="utf-8"))
VERSION = GALAXY["version"]
HOST_ROOTFS = "/var/tmp/sparklab/images/host-bookworm/rootfs"
WORK = "/root/sparkfleet-ee"


def _pins():
    pins = {}
    with open(os.path.join(REPO, "requirements.txt"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
            if m:
                pins[m.group(1).lower()] = m.group(0)
    return pins


def _ok(p, what):
    assert p.returncode == 0, "%s failed (rc=%d):\n%s\n%s" % (what, p.returncode, p.stdout[-4000:], p.stderr[-4000:])
    return p


def _in_host(lab, script, timeout=1800, stdin=None):
    return subprocess.run([str(lab.repo / "lab" / "labctl"), "exec", HOST, "sh", "-c", script], input=stdin,
                          capture_output=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def ee_context(lab, tmp_path_factory):
    work = tmp_path_factory.mktemp("ee")
    # The wheelhouse, made where pip reaches its index (the root network namespace; the control namespace has none).
    pins = _pins()
    reqs = [pins["ansible-core"], pins["ansible-runner"], pins["matplotlib"], "dumb-init==1.2.5", "bindep", "pyyaml",
            "packaging", "wheel", "setuptools"]
    _ok(lab.root_ns(os.path.join(BIN, "pip"), "wheel", "-q", "-w", str(work / "base" / "wheels"), *reqs, timeout=1800),
        "pip wheel")
    # The base: Dockerfile only (its layers come from the imported rootfs and the files beside it).
    runtime_base = sorted(d for d in glob.glob("/var/tmp/sparklab/cache/runtime/base-*") if os.path.isdir(d))
    assert runtime_base, "no lab runtime base under /var/tmp/sparklab/cache/runtime (lab/runtime/build.sh makes it)"
    shutil.copytree(os.path.join(runtime_base[-1], "usr/lib/python3.11/ensurepip"), work / "base" / "ensurepip")
    shutil.copytree(os.path.join(runtime_base[-1], "usr/share/python-wheels"), work / "base" / "python-wheels")
    (work / "base" / "Dockerfile").write_text(
        "FROM sparklab/ee-rootfs:bookworm\n"
        "COPY ensurepip /usr/lib/python3.11/ensurepip\n"
        "COPY python-wheels /usr/share/python-wheels\n"
        "COPY wheels /opt/sparklab-wheels\n"
        "RUN python3.11 -m venv /opt/py\n"
        "ENV PATH=/opt/py/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PIP_NO_INDEX=1 "
        "PIP_FIND_LINKS=/opt/sparklab-wheels\n")
    # The EE context, as a user makes it: the tarball in dist/, then ansible-builder.
    ee = work / "ee"
    ee.mkdir()
    shutil.copy(os.path.join(REPO, "execution-environment.yml"), ee)
    _ok(subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", REPO, "--output-path",
                        str(ee / "dist")], capture_output=True, text=True, timeout=300, check=False), "collection build")
    _ok(subprocess.run([os.path.join(BIN, "ansible-builder"), "create", "--file", "execution-environment.yml",
                        "--context", "ctx", "--output-filename", "Containerfile"], cwd=str(ee), capture_output=True,
                       text=True, timeout=300, check=False), "ansible-builder create")
    # Into the host: the rootfs as an image, then the two build contexts.
    tar = subprocess.Popen(["tar", "-C", HOST_ROOTFS, "--exclude=./var/lib/docker/*", "--exclude=./proc/*",
                            "--exclude=./sys/*", "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run([str(lab.repo / "lab" / "labctl"), "exec", HOST, "docker", "import", "-",
                               "sparklab/ee-rootfs:bookworm"], stdin=tar.stdout, capture_output=True, timeout=1800,
                              check=False)
    tar.stdout.close()
    tar.wait()
    _ok(imported, "docker import of the lab rootfs")
    pack = subprocess.run(["tar", "-C", str(work), "-c", "base", "ee/ctx"], capture_output=True, check=True)
    _ok(_in_host(lab, "rm -rf %s && mkdir -p %s && tar -C %s -x" % (WORK, WORK, WORK), stdin=pack.stdout), "copy")
    _ok(_in_host(lab, "docker build --network none -q -t sparklab/ee-base:bookworm %s/base" % WORK), "base build")
    yield work
    _in_host(lab, "docker rmi -f sparkfleet-vllm-ee:lab sparklab/ee-base:bookworm sparklab/ee-rootfs:bookworm; "
                  "docker image prune -f; rm -rf %s" % WORK, timeout=600)


def _build(lab, version, tag):
    args = "--build-arg EE_BASE_IMAGE=sparklab/ee-base:bookworm --build-arg PKGMGR=/usr/bin/apt-get " \
           "--build-arg PYCMD=/opt/py/bin/python3.11 --build-arg SPARKFLEET_VERSION=%s" % version
    return _in_host(lab, "cd %s/ee/ctx && docker build --network none %s -f Containerfile -t %s ." % (WORK, args, tag))


def test_the_ee_builds_and_lists_the_collection(lab, ee_context, observe):
    built = _ok(_build(lab, VERSION, "sparkfleet-vllm-ee:lab"), "EE build")
    run = _ok(_in_host(lab, "docker run --rm --network none sparkfleet-vllm-ee:lab ansible-doc -l sparkfleet.vllm"),
              "ansible-doc -l in the EE")
    listed = run.stdout.decode()
    modules = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "plugins", "modules")) if not f.startswith("_"))
    for name in modules:
        assert "sparkfleet.vllm.%s " % name in listed, (name, listed)
    observe("EE built (%d build lines); ansible-doc -l lists %d modules" % (
        len(built.stdout.splitlines()), len(modules)))
    # What the EE runs for AWX: the pinned controller, the chart's library, the playbooks by FQCN on the sample.
    check = _ok(_in_host(lab, "docker run --rm --network none sparkfleet-vllm-ee:lab sh -c '"
                              "ansible --version | head -1; python3 -c \"import matplotlib; print(matplotlib.__version__)\";"
                              " ansible-playbook --syntax-check -i /usr/share/ansible/collections/ansible_collections/"
                              "sparkfleet/vllm/inventories/sample sparkfleet.vllm.site'"), "inside the EE").stdout.decode()
    assert "core %s" % _pins()["ansible-core"].split("==")[1] in check, check
    assert _pins()["matplotlib"].split("==")[1] in check and "sparkfleet/vllm/playbooks/site.yml" in check, check


def test_a_build_without_the_tarball_of_that_version_stops_naming_the_fix(lab, ee_context):
    p = _build(lab, "9.9.9", "sparkfleet-vllm-ee:missing")
    out = (p.stdout + p.stderr).decode()
    assert p.returncode != 0, out[-3000:]
    assert "no dist/sparkfleet-vllm-9.9.9.tar.gz in the build context: run ansible-galaxy collection build" in out, \
        out[-3000:]
