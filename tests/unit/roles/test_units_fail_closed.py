"""Issue 40.4: no check of a unit can fail open.

systemd applies a service's SuccessExitStatus= to its ExecStartPre/ExecStartPost commands as well as to the main
process (src/core/service.c, service_sigchld_event: only systemd's own helpers are exempt). The Ray unit lists
1, 143 and SIGTERM (`ray start --block` drained by docker stop), the vLLM unit 143 and SIGTERM. So `nft -f` refusing
the ruleset (exit 1), a check that crashes (a bash error or a Python traceback: 1) or one ended by SIGTERM read as
success, and Ray started without its firewall or its head-identity check. Every check now runs through
sparkfleet-must, which turns each of those into 3.

Each rendered unit's checks are run here, as the unit runs them (paths mapped to the role's files), with crashing
input: the tools they call crashing (docker, ss, nft, systemctl, journalctl: exit 1), their last argument cut off, a
timeout argument bash cannot read; and the shim with a command that dies by SIGTERM. None may end with 0 or with a
status the unit lists as success.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.sparkfleet.vllm.tests.unit.support.units import ray_unit, vllm_unit

REPO = Path(__file__).resolve().parents[3]
FILES = REPO / "roles" / "sparkfleet" / "files"        # the scripts both units run (the floor's)
RAY_FILES = REPO / "roles" / "ray_cluster" / "files"   # the Ray unit's own (sparkfleet-ray-guard)
MUST = "/usr/local/sbin/sparkfleet-must"
SIGNALS = {"SIG" + s.name[3:]: s.value for s in signal.Signals}


def service(text):
    """The [Service] section's (key, value) pairs."""
    section, pairs = None, []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _sep, value = line.partition("=")
        if section == "Service":
            pairs.append((key, value))
    return pairs


def success_statuses(pairs):
    """SuccessExitStatus= as (statuses, signal numbers)."""
    codes, sigs = set(), set()
    for key, value in pairs:
        if key == "SuccessExitStatus":
            for word in value.split():
                if word.isdigit():
                    codes.add(int(word))
                else:
                    sigs.add(SIGNALS["SIG" + word.upper().removeprefix("SIG")])
    return codes, sigs


def checks(pairs):
    """The unit's ExecStartPre/ExecStartPost commands whose failure must stop the start (no '-' prefix)."""
    return [value for key, value in pairs if key in ("ExecStartPre", "ExecStartPost") and not value.startswith("-")]


@pytest.fixture
def sandbox(tmp_path):
    """The node as far as the checks reach it: our files at their paths under tmp, every tool they call crashing."""
    sbin, lib, bin_ = tmp_path / "sbin", tmp_path / "lib", tmp_path / "bin"
    for d in (sbin, lib, bin_, tmp_path / "etc", tmp_path / "run", tmp_path / "state", tmp_path / "model"):
        d.mkdir()
    for name in ("sparkfleet-must", "sparkfleet-wait", "sparkfleet-ray-guard", "sparkfleet-run"):
        shutil.copy((RAY_FILES if name == "sparkfleet-ray-guard" else FILES) / name, sbin / name)
        (sbin / name).chmod(0o755)
    shutil.copy(FILES / "sparkfleet_watchdog.py", lib / "sparkfleet-watchdog.py")
    shutil.copy(FILES / "sparkfleet_memory.py", lib / "sparkfleet_memory.py")
    for tool in ("docker", "ss", "nft", "systemctl", "journalctl", "nvidia-smi"):
        (bin_ / tool).write_text("#!/bin/sh\necho \"%s: crashed (test)\" >&2\nexit 1\n" % tool)
        (bin_ / tool).chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (bin_, os.environ.get("PATH", "/usr/bin:/bin")), PYTHONDONTWRITEBYTECODE="1",
               SPARKFLEET_WATCHDOG_DIR=str(tmp_path / "state"), SPARKFLEET_WATCHDOG_RUN_DIR=str(tmp_path / "run"),
               SPARKFLEET_MODEL_MANIFEST=str(tmp_path / "state" / "model-manifest.json"), LC_ALL="C")

    def argv(command):
        words = shlex.split(command)
        mapped = []
        for word in words:
            if word.startswith("/usr/local/sbin/"):
                word = str(sbin / word.rsplit("/", 1)[1])
            elif word == "/usr/local/lib/sparkfleet-watchdog.py":
                word = str(lib / "sparkfleet-watchdog.py")
            elif word == "/usr/sbin/nft":
                word = str(bin_ / "nft")
            elif word == "/usr/bin/python3":
                word = shutil.which("python3") or word
            mapped.append(word)
        return mapped

    def run(words, timeout=60):
        proc = subprocess.run(words, env=env, capture_output=True, text=True, timeout=timeout, check=False,
                              cwd=tmp_path)
        return proc.returncode, proc.stderr
    return tmp_path, argv, run


def _crashing_variants(words):
    """The check's argv with crashing input: as rendered (its tools crash), its last word cut off, and its last
    number made one bash cannot read."""
    variants = [("tools crash", words), ("last argument cut", words[:-1])]
    numeric = [i for i, w in enumerate(words) if w.isdigit()]
    if numeric:
        bad = list(words)
        bad[numeric[-1]] = "1.5"
        variants.append(("number bash cannot read", bad))
    return variants


UNITS = [pytest.param(lambda tmp: ray_unit(True, tmp), id="ray head"),
         pytest.param(lambda tmp: ray_unit(False, tmp), id="ray worker"),
         pytest.param(lambda tmp: ray_unit(False, tmp, live_restore=True), id="ray worker, live-restore"),
         pytest.param(vllm_unit, id="vllm")]


@pytest.mark.parametrize("make", UNITS)
def test_every_check_of_a_unit_that_counts_failures_as_success_runs_through_the_shim(make, tmp_path):
    pairs = service(make(tmp_path))
    codes, sigs = success_statuses(pairs)
    assert codes or sigs, "this unit lists no success status; the test would prove nothing"
    unwrapped = [c for c in checks(pairs) if shlex.split(c)[0] != MUST]
    assert not unwrapped, "run these through %s (SuccessExitStatus=%s applies to them): %s" % (
        MUST, sorted(codes) + sorted(sigs), unwrapped)


@pytest.mark.bad_input(name="a unit's check that crashes (its tools fail, an argument cut off or unreadable)",
                       expected="the check ends with a status the unit treats as failure: the unit does not start")
@pytest.mark.parametrize("make", UNITS)
def test_a_crashing_check_never_ends_with_a_status_the_unit_counts_as_success(make, sandbox, observe):
    tmp, argv, run = sandbox
    pairs = service(make(tmp))
    codes, sigs = success_statuses(pairs)
    seen = []
    for command in checks(pairs):
        for how, words in _crashing_variants(argv(command)):
            rc, err = run(words)
            core = shlex.split(command)
            core = core[1:] if core[0] == MUST else core
            label = "%s %s (%s)" % (os.path.basename(core[0]), core[1] if len(core) > 1 else "", how)
            assert rc >= 0 and -rc not in sigs, "%s: ended by signal %d, which the unit counts as success" % (
                label, -rc)
            assert rc != 0, "%s: exit 0, the unit would start: %s" % (label, err[-500:])
            assert rc not in codes, "%s: exit %d, which the unit counts as success (SuccessExitStatus): %s" % (
                label, rc, err[-500:])
            seen.append("%s -> %d" % (label, rc))
    assert seen
    observe("; ".join(seen))


@pytest.mark.parametrize("crash, expected", [
    ("exit 1", 3), ("kill -TERM $$", 3), ("kill -HUP $$", 3), ("exit 143", 3), ("exit 127", 3), ("exit 2", 2),
    ("exit 3", 3), ("exit 0", 0),
])
def test_the_shim_turns_every_failure_the_units_accept_into_3(sandbox, crash, expected):
    tmp, _argv, run = sandbox
    rc, _err = run([str(tmp / "sbin" / "sparkfleet-must"), "sh", "-c", crash])
    assert rc == expected


def test_the_shim_ended_by_sigterm_exits_3_not_by_the_signal(sandbox):
    tmp, _argv, _run = sandbox
    proc = subprocess.Popen([str(tmp / "sbin" / "sparkfleet-must"), "sleep", "30"], stderr=subprocess.PIPE, text=True)
    try:
        import time
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 3 and "stopped by SIGTERM" in err, (proc.returncode, err)


def test_the_shim_is_installed_where_the_units_call_it():
    """The floor's list of the units' scripts holds it; both roles whose units run it write that list."""
    scripts = yaml.safe_load((REPO / "roles" / "sparkfleet" / "vars" / "main.yml").read_text())["_sparkfleet_unit_scripts"]
    shim = [s for s in scripts if s["path"] == MUST]
    assert len(shim) == 1 and "/../sparkfleet/files/sparkfleet-must'" in shim[0]["content"] and shim[0]["mode"] == "0755"
    for role in ("ray_cluster", "vllm_serve"):
        tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "main.yml").read_text())
        writes = [t for t in tasks if "sparkfleet.vllm.config_files" in t]
        assert any("_sparkfleet_unit_scripts" in str(t["sparkfleet.vllm.config_files"]["files"]) for t in writes), role


# ---- every unit the collection writes (issue 40.4 over all templates, monitoring's included)
# Rendered as the roles render them (tests/unit/support/rendered.py), in each of their branches.

def _every_unit():
    from ansible_collections.sparkfleet.vllm.tests.unit.support import rendered
    variants = {"head": {}, "worker": {"inventory_hostname": "spark-2", "sparkfleet_fabric_ip": "192.168.200.13"},
                "live-restore": {"_ray_cluster_node": {"systemd_version": 255, "docker_live_restore": True},
                                 "_vllm_serve_model_state": {"systemd_version": 255, "docker_live_restore": True}},
                "no memory gate": {"vllm_serve_memory_gate": False}}
    out = []
    for path in sorted(REPO.glob("roles/*/templates/*.j2")):
        if path.name.endswith((".service.j2", ".timer.j2", ".conf.j2")):
            for how, over in variants.items():
                out.append((path.name, how, rendered.render_template(path, rendered.variables(**over))))
    return out


# The commands whose failure a unit ignores ('-'): each a cleanup or a record, never a check.
IGNORED_FAILURES = {
    "/usr/bin/docker rm -f": "removes a container left from an earlier start, or after a stop: none there is fine",
    "/usr/bin/python3 /usr/local/lib/sparkfleet-watchdog.py record": "records why the unit stopped (status.yml)",
    "/usr/bin/systemctl stop": "stops the stale stack's units gpu_cleanup found; one already gone is fine (Ray does not "
                               "Require this unit: its own checks and the GPU plan guard the start)",
    "/usr/bin/docker update --restart=no": "keeps the stale containers from coming back; one already gone is fine",
    "/usr/bin/docker stop -t": "stops the stale containers; one already gone is fine",
}
# Units that guard another service from outside it: the guarded service must Require them (Before= alone lets it start
# when the guard fails).
GUARDS = {"sparkfleet-monitoring-firewall.service.j2": ("prometheus-node-exporter", "prometheus",
                                                        "prometheus-alertmanager")}


@pytest.fixture(scope="module")
def every_unit():
    return _every_unit()


def test_only_cleanups_may_fail_without_failing_the_unit(every_unit):
    ignored = set()
    for name, how, text in every_unit:
        for key, value in service(text):
            if key.startswith("Exec") and value.startswith("-"):
                known = [k for k in IGNORED_FAILURES if value[1:].startswith(k)]
                assert known, "%s (%s): %s=%s ignores its failure; if it is a check, it must fail the unit" % (
                    name, how, key, value)
                ignored.update(known)
    assert ignored == set(IGNORED_FAILURES), "a listed cleanup is gone: %s" % (set(IGNORED_FAILURES) - ignored)


def test_no_template_or_helper_turns_an_error_into_success():
    found = []
    for path in sorted(REPO.glob("roles/*/templates/*.j2")) + sorted((REPO / "roles/ray_cluster/files").glob("sparkfleet-*")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"\|\|\s*(true|:)\b|;\s*true\s*$", code):
                found.append("%s:%d: %s" % (path.name, number, line.strip()))
    assert not found, found


def test_every_unit_that_counts_a_failure_as_success_runs_its_checks_through_the_shim(every_unit):
    for name, how, text in every_unit:
        pairs = service(text)
        codes, sigs = success_statuses(pairs)
        if codes - {0} or sigs:
            unwrapped = [c for c in checks(pairs) if shlex.split(c)[0] != MUST]
            assert not unwrapped, "%s (%s): run through %s: %s" % (name, how, MUST, unwrapped)


@pytest.mark.bad_input(name="the monitoring firewall's unit fails (nft refuses the ruleset, nft missing)",
                       expected="the exporters, Prometheus and Alertmanager do not start (they Require it)")
def test_a_guard_unit_that_fails_keeps_what_it_guards_from_starting(observe):
    from ansible_collections.sparkfleet.vllm.tests.unit.support import rendered
    dropin = rendered.render_template(REPO / "roles/monitoring/templates/firewall-first.conf.j2", rendered.variables())
    tasks = (REPO / "roles/monitoring/tasks/main.yml").read_text()
    for guard, guarded in GUARDS.items():
        unit = guard[:-3]
        pairs = [tuple(line.split("=", 1)) for line in dropin.splitlines() if "=" in line and not line.startswith("#")]
        assert ("Requires", unit) in pairs and ("After", unit) in pairs, dropin
        for service_name in guarded:
            path = "/etc/systemd/system/%s.service.d/10-sparkfleet-firewall.conf" % service_name
            assert ("- path: %s\n        content: \"{{ lookup('ansible.builtin.template', 'firewall-first.conf.j2') }}\""
                    % path) in tasks, "%s is not written" % path
    observe("the exporters, Prometheus and Alertmanager Require and start After %s" % ", ".join(g[:-3] for g in GUARDS))
