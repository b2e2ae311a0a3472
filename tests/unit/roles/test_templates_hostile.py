"""Issue 40.5 for every template: each file a role renders from its templates (units, timers, drop-ins, the Debian
/etc/default env files, Prometheus' and Alertmanager's YAML), with hostile values (newline, '%', quotes, blanks, NUL,
'$', very long, numbers in other spellings) for every variable that reaches it, followed through the derived variables
of vars/main.yml to the one the user sets. Each value is refused by the check preflight runs on it (the same
functions: settings_errors, the inventory's checks), or the file parses, as its reader reads it, to exactly the
directives and words it has with a plain value. The units rendered with the values that passed go through
`systemd-analyze verify` too.

A template, or a variable of one, that this table does not name fails test_every_input_of_every_template_is_judged:
the coverage cannot shrink without a test saying so.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import shlex
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _inventory
from ansible_collections.sparkfleet.vllm.plugins.plugin_utils import _validate as v
from ansible_collections.sparkfleet.vllm.tests.unit.support import rendered as r

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = sorted(REPO.glob("roles/*/templates/*.j2"))
UNIT_SUFFIXES = (".service.j2", ".timer.j2", ".conf.j2")
DEFAULT_FILES = ("prometheus.default.j2", "prometheus-node-exporter.default.j2", "prometheus-alertmanager.default.j2")
YAML_FILES = ("prometheus.yml.j2", "alertmanager.yml.j2", "thresholds.yml.j2")

# Inputs no user sets: what the node or the controller gives, and why a hostile value cannot come from there.
NOT_SET_BY_THE_USER = {
    "ansible_managed": "ansible-core's comment text (ansible.cfg of the controller), written on a comment line",
    "_monitoring_mgmt_net": "read from the head's `ip -o addr` for the checked sparkfleet_mgmt_ip: ADDRESS/DIGITS",
    "_ray_cluster_node": "node_facts' output, read through | int (systemd_version) and | bool (docker_live_restore)",
    "_vllm_serve_model_state": "node_facts' output, read through | int (systemd_version) and | bool",
    "_ray_cluster_image": "`docker image inspect` on the node: the image's sha256 ID",
    "sparkfleet_runtime_image_ref": "runtime_image's fact: the image's local sha256 ID on the node",
    "sparkfleet_runtime_image_present": "runtime_image's fact: ray_cluster_image as checked (check_image)",
    "sparkfleet_image_check": "image_check's fact: the image's ID and the recipe words the image proved",
    "sparkfleet_fabric": "rdma_facts' output: the node's RDMA device paths (/dev/infiniband/...) and interface names",
    "_ray_cluster_token": "the token generated on the head (`ray` prints it; printable ASCII, checked by env_value)",
    "_ray_cluster_ray_version": "`ray --version` in the image, read by the ray_version filter (a version or '')",
    "sparkfleet_runtime_image_ids": "runtime_image's fact: the head's image ID and content hash (sha256 hex)",
    "_gpu_cleanup_record": "gpu_release's record: unit names systemd listed and container names docker listed on the "
                           "node (test_the_stale_record_s_names_render_as_one_word_each judges them)",
}


def _inventory_ok(name, value):
    """The inventory check preflight runs first (inventory_check.yml), on a value of one node's variable."""
    hostvars = {h: {"sparkfleet_fabric_subnet": "192.168.200.0/24", "sparkfleet_fabric_ip": ip, "ansible_host": m}
                for h, ip, m in (("spark-1", "192.168.200.12", "10.1.230.180"),
                                 ("spark-2", "192.168.200.13", "10.1.230.181"))}
    groups = {"spark": ["spark-1", "spark-2"], "spark_head": ["spark-1"], "spark_workers": ["spark-2"]}
    if name == "sparkfleet_fabric_subnet":
        for h in hostvars:
            hostvars[h][name] = value
    else:
        hostvars["spark-1"][name] = value
    return not [e for e in _inventory.inventory_errors(hostvars, groups) if name in e]


def _host_name_ok(value):
    return _inventory._why_not_a_name(value) is None


def _nodes_ok(value):
    """sparkfleet_cluster_nodes is built from the inventory's node names and their fabric IPs: both checked."""
    hosts = [n["host"] for n in value]
    groups = {"spark": hosts, "spark_head": hosts[:1], "spark_workers": hosts[1:]}
    hostvars = {n["host"]: {"sparkfleet_fabric_subnet": "192.168.200.0/24", "sparkfleet_fabric_ip": n["ip"],
                            "ansible_host": "10.1.230.%d" % (180 + i)} for i, n in enumerate(value)}
    return not _inventory.inventory_errors(hostvars, groups)


def _setting_ok(name, value):
    """settings_errors, the check preflight's validate.yml runs on every role's variables: no problem names `name`."""
    errors = v.settings_errors({name: value, "sparkfleet_fabric_subnet": "192.168.200.0/24"}, "spark-1", head=True)
    return not [e for e in errors if re.search(r"\b%s\b" % re.escape(name), e)]


INVENTORY_CHECKS = {
    "inventory_hostname": _host_name_ok,
    "sparkfleet_head_host": _host_name_ok,
    "sparkfleet_fabric_ip": lambda value: _inventory_ok("sparkfleet_fabric_ip", value),
    "sparkfleet_head_fabric_ip": lambda value: _inventory_ok("sparkfleet_fabric_ip", value),
    "sparkfleet_fabric_subnet": lambda value: _inventory_ok("sparkfleet_fabric_subnet", value),
    "sparkfleet_cluster_nodes": _nodes_ok,
}


def guard(name):
    """The check preflight runs on a variable, or None."""
    if name in INVENTORY_CHECKS:
        return INVENTORY_CHECKS[name]
    if name in v.ROLE_CHECKS or name in v.SERVING_CHECKS:
        return lambda value: _setting_ok(name, value)
    return None


# The plain word of a variable whose default is unset (None or ''), which renders no word at all.
PLAIN_WORDS = {"vllm_serve_api_key": "sk-plain-key", "monitoring_webhook_url": "http://10.1.2.3:9000/hook", "ray_cluster_num_cpus": 4,
               "model_sync_scrub_interval": "weekly"}
# Settings whose value is None by default: compared with a plain word (they render none when unset).
PLAIN_WORDS_SET = {"vllm_serve_load_format": "safetensors", "vllm_serve_safetensors_load_strategy": "lazy"}
# A node's name is also the head's name when the head is the node rendered (the head's files are the ones that read
# both): the one name is set in both places.
SAME_NAME = ("inventory_hostname", "sparkfleet_head_host")


# How a hostile word is set in a variable that is no plain word (a list, a dict, the node list), and the plain word
# whose file it is compared with.
@functools.lru_cache(maxsize=None)
def _plain(name):
    return r.PLAIN[name] if name in r.PLAIN else r.value_of(r.variables(), name)


def _wrap(name):
    plain = _plain(name)
    if name == "sparkfleet_cluster_nodes":
        return lambda word: [dict(plain[0], host=word), plain[1]], "spark-9"
    if name in ("vllm_serve_env", "ray_cluster_env"):
        return lambda word: {"SPARKFLEET_TEST": word}, "plain"
    if name == "vllm_serve_extra_args":
        return lambda word: {"block-size": word}, "16"
    if name == "ray_cluster_extra_args":
        return lambda word: ["--object-store-memory", word], "1000000000"
    if name in ("vllm_serve_gpu_args", "ray_cluster_gpu_args"):
        return lambda word: ["--gpus", word], "all"
    if name in ("ray_cluster_firewall_allow", "monitoring_allow"):
        return lambda word: [word], "192.168.200.0/25"
    return (lambda word: word), PLAIN_WORDS.get(name, PLAIN_WORDS_SET.get(name, plain))


def reaches():
    """(template, input) for every input a template reads that a user sets."""
    out = []
    for path in TEMPLATES:
        for name in sorted(r.inputs(path.read_text(encoding="utf-8"))):
            if name not in NOT_SET_BY_THE_USER:
                out.append((path, name))
    return out


REACHES = reaches()
HOSTILE = ["x\nExecStartPre=/bin/sh -c id", "a%n", "a b", "it's", 'say "hi"', "nul\0byte", "$HOME", "a\\nb", ";reboot",
           "x" * 5000, " 30", "30\n", "030", "+30", 30.0, 2 ** 70, "", "-1", "%H", "[Service]", "a\rb", "\u2028",
           "/etc/sparkfleet\nUser=root", "spark-1 --head", "#x", "x: y", "{a: b}", "- x", "a,b", "'", '"', "\\",
           "http://h/\"x", "http://h/\\x41", "http://h/a b", "10.0.0.0/8\n", "::1", "fd00::5", "1e3", "0.5", "true"]


def _kind(path):
    if path.name.endswith(UNIT_SUFFIXES):
        return "unit"
    if path.name in DEFAULT_FILES:
        return "default"
    if path.name in YAML_FILES:
        return "yaml"
    return None


def _target_ok(target):
    """A Prometheus target: HOST:PORT, an IPv6 host in brackets."""
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})", target)
    if not m:
        return False
    host = m.group(1).strip("[]")
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return v.is_host_name(host)


def _yaml_meaning(path, doc):
    """What a YAML file's reader takes from it, beyond its structure."""
    for where, leaf in r.leaves(doc):
        if "targets" in where:
            assert _target_ok(leaf), "%s: the target %r is not HOST:PORT" % (path.name, leaf)
        if where[-1:] == ("url",):
            assert v.check_url(leaf)[1] is None, "%s: the url %r" % (path.name, leaf)
        if where[-1:] == ("expr",):
            assert re.fullmatch(r"vector\([0-9.e+-]+\)", leaf), "%s: %r" % (path.name, leaf)
        if where[-1:] in (("scrape_interval",), ("evaluation_interval",)):
            assert re.fullmatch(r"[1-9][0-9]*s", leaf), "%s: %r" % (path.name, leaf)


def shape(path, text):
    kind = _kind(path)
    if kind == "unit":
        return r.unit_shape(text)
    if kind == "default":
        return r.default_file_shape(text)
    doc = yaml.safe_load(text)
    _yaml_meaning(path, doc)
    return r.skeleton(doc)


_PLAIN_SHAPES = {}


_RENDERED = {}


def _render(path, name, value):
    key = (path, name, repr(value))
    if key not in _RENDERED:
        over = dict.fromkeys(SAME_NAME, value) if name in SAME_NAME else {name: value}
        if name == "sparkfleet_cluster_nodes":
            over["sparkfleet_head_host"] = value[0]["host"]
        _RENDERED[key] = r.render_template(path, r.variables(**over))
    return _RENDERED[key]


def judge(path, name, word):
    """'refused' (preflight's check refuses the value), or 'rendered' (the file parses as with a plain value)."""
    wrap, plain_word = _wrap(name)
    value = wrap(word)
    if name in PLAIN_WORDS and word in ("", None):
        return "unset"      # the documented 'off' of an optional setting: it renders no word, as its default does
    check = guard(name)
    assert check is not None, "%s reaches %s but no check of preflight's guards it" % (name, path.name)
    if not check(value):
        return "refused"
    key = (path, name)
    if key not in _PLAIN_SHAPES:
        _PLAIN_SHAPES[key] = shape(path, _render(path, name, wrap(plain_word)))
    got = shape(path, _render(path, name, value))
    assert got == _PLAIN_SHAPES[key], "%s with %s=%r:\n%s\nplain:\n%s" % (
        path.name, name, value, got, _PLAIN_SHAPES[key])
    return "rendered"


def test_every_input_of_every_template_is_judged():
    """Every template writes a kind of file parsed here, and every variable that reaches it is one a check of
    preflight's guards (or one the node gives, with its reason)."""
    assert {p.name for p in TEMPLATES if _kind(p) is None} == set(), "a template of a kind this test does not parse"
    unguarded = sorted({(p.name, n) for p, n in REACHES if guard(n) is None})
    assert not unguarded, ("these variables reach a template and no check of preflight's guards them: add the check"
                           " to plugins/plugin_utils/_validate.py (ROLE_CHECKS), or name why no user sets them: %s"
                           % unguarded)
    assert len(TEMPLATES) >= 19 and len(REACHES) > 100, (len(TEMPLATES), len(REACHES))


def test_the_trace_follows_derived_variables_to_what_the_user_sets():
    firewall = REPO / "roles/monitoring/templates/sparkfleet-monitoring-firewall.service.j2"
    traced = r.inputs(firewall.read_text())
    # _monitoring_allow -> sparkfleet_fabric_subnet, monitoring_allow; _monitoring_nft -> the floor's view of ray_cluster
    assert {"sparkfleet_fabric_subnet", "monitoring_allow", "ray_cluster_firewall_nft", "sparkfleet_config_dir"} <= set(
        traced), traced
    assert "_monitoring_allow" not in traced and traced["monitoring_allow"][0] == "_monitoring_allow"


@pytest.mark.bad_input(name="hostile values for every variable that reaches any template (units, timers, drop-ins, "
                            "/etc/default env files, Prometheus' and Alertmanager's YAML)",
                       expected="refused by preflight's check, or the file parses to exactly the intended directives")
@pytest.mark.parametrize("path, name", REACHES, ids=["%s:%s" % (p.name, n) for p, n in REACHES])
def test_every_hostile_value_is_refused_or_renders_the_same_file(path, name):
    outcome = [judge(path, name, word) for word in HOSTILE]
    assert judge(path, name, _wrap(name)[1]) == "rendered", "the plain value is refused: the test would prove nothing"
    assert "refused" in outcome, "no hostile value refused: %s" % name


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=st.sampled_from(REACHES),
       word=st.text(st.characters(codec="utf-8"), max_size=40) | st.integers() | st.floats(allow_nan=False)
       | st.sampled_from(HOSTILE))
def test_property_any_value_is_refused_or_renders_the_same_file(pair, word):
    judge(pair[0], pair[1], word)


UNIT_TEMPLATES = [p for p in TEMPLATES if _kind(p) == "unit"]


@pytest.mark.parametrize("path", UNIT_TEMPLATES, ids=lambda p: p.name)
def test_systemd_analyze_verify_accepts_every_unit_rendered_with_the_values_that_passed(path):
    suffix = "." + path.name[:-3].rsplit(".", 1)[1]
    if suffix == ".conf":
        suffix = ".service"     # a drop-in: verified as the unit it extends would read it
    units = {}
    for p, name in REACHES:
        if p != path:
            continue
        wrap, plain = _wrap(name)
        for word in HOSTILE + [plain]:
            if guard(name)(wrap(word)) and not (name in PLAIN_WORDS and word in ("", None)):
                units["t%d%s" % (len(units), suffix)] = _render(path, name, wrap(word))
    if not units:
        units["t0" + suffix] = r.render_template(path, r.variables())
    if path.name.endswith(".conf.j2"):
        units = {n: t + "\n[Service]\nExecStart=/usr/bin/true\n" for n, t in units.items()}
    problems = r.verify(units)
    if problems is None:
        pytest.skip("systemd-analyze is not installed here")
    assert not problems, "\n".join(problems[:20])


# ---- the stale stack's record (names the node gave)

@pytest.mark.parametrize("units, containers", [
    (["vllm-cluster.service"], ["vllm-old"]),
    (["vllm@model-1.service", "a:b.service", "sglang_x.service"], ["old.vllm_1", "a-b"]),
])
def test_the_stale_record_s_names_render_as_one_word_each(units, containers):
    text = r.render_template(REPO / "roles/gpu_cleanup/templates/sparkfleet-stale-stop.service.j2",
                             r.variables(_gpu_cleanup_record={"units": units, "containers": containers}))
    execs = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("ExecStart=")]
    expected = [["stop"] + units, ["update", "--restart=no"] + containers, ["stop", "-t", "10"] + containers]
    assert [e.split()[1:] for e in execs] == expected, execs
    r.unit_shape(text)


# ---- the sudoers line preflight prints for a person to paste into a root shell (roles/preflight/tasks/access.yml)

def _sudoers_command(user):
    tasks = yaml.safe_load((REPO / "roles/preflight/tasks/access.yml").read_text())
    source = next(t["vars"]["_preflight_access_sudoers"] for t in tasks if "_preflight_access_sudoers" in t.get("vars", {}))
    return r.variables(_preflight_access_user=user).template(r.trust_as_template(source))


@pytest.mark.bad_input(name="an ansible_user with a quote, a blank, a newline or ';' (it reaches the sudoers line "
                            "preflight prints for a person to paste as root)",
                       expected="the inventory check refuses it naming the host and ansible_user; a plain name gives "
                                "one sudoers rule and the three commands")
@pytest.mark.parametrize("user", HOSTILE + ["spark", "ai.ops", "svc_deploy", "x' ALL=(ALL) NOPASSWD: ALL'; id; echo '"])
def test_the_sudoers_line_is_refused_or_one_rule_for_the_user(user, observe):
    if not _inventory_ok("ansible_user", user):
        return
    command = _sudoers_command(user)
    words = shlex.split(command)
    assert words == ["echo", "%s ALL=(ALL) NOPASSWD: ALL" % user, "|", "sudo", "tee",
                     "/etc/sudoers.d/%s-nopasswd" % user, "&&", "sudo", "chmod", "440",
                     "/etc/sudoers.d/%s-nopasswd" % user], command
    observe(command)


# ---- 40.3: the served names as a list reach every template that reads them (traced through derived variables)

SERVED = "vllm_serve_served_model_name"


def test_every_template_the_served_names_reach_uses_the_element_it_means():
    names = ["qwen3-coder", "qwen", "coder"]
    reached = sorted(p.name for p, n in REACHES if n == SERVED)
    assert reached == ["sparkfleet-vllm-watchdog.service.j2", "sparkfleet-vllm.service.j2"], (
        "a new template reads the served name: say here which element it uses, and test it with a list: %s" % reached)
    for path in (p for p, n in REACHES if n == SERVED):
        text = _render(path, SERVED, names)
        start = shlex.split(next(line for line in text.splitlines() if line.startswith("ExecStart=")).split("=", 1)[1])
        if "watchdog" in path.name:
            assert start[start.index("--model") + 1] == names[0], start          # the probe asks for one name
        else:
            i = start.index("--served-model-name")
            assert start[i + 1:i + 4] == names and start[i + 4].startswith("--"), start    # the server answers to all
        r.unit_shape(text)


# ---- the env files tasks write (docker run --env-file): ray.env, ray-client.env, vllm.env

def _env_files():
    """(role, file name, the content's Jinja) of every *.env file a role's tasks write, read from the tasks."""
    out = []
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")):
        def walk(obj):
            if isinstance(obj, dict):
                if str(obj.get("path", "")).endswith(".env") and isinstance(obj.get("content"), str):
                    yield obj["path"].rsplit("/", 1)[-1], obj["content"]
                for item in obj.values():
                    yield from walk(item)
            elif isinstance(obj, list):
                for item in obj:
                    yield from walk(item)
        out += [(path.parts[-3], name, content) for name, content in walk(yaml.safe_load(path.read_text()))]
    return out


ENV_FILES = _env_files()
ENV_REACHES = [(role, name, content, var) for role, name, content in ENV_FILES
               for var in sorted(r.inputs(content.replace("sparkfleet.vllm.", ""))) if var not in NOT_SET_BY_THE_USER]
_PLAIN_ENV = {}


def _env_file(content, name, value):
    over = dict.fromkeys(SAME_NAME, value) if name in SAME_NAME else {name: value}
    return r.docker_env_file(r.variables(**over).template(r.trust_as_template(content.replace("sparkfleet.vllm.", ""))))


def judge_env(content, name, word):
    wrap, plain_word = _wrap(name)
    value = wrap(word)
    if name in PLAIN_WORDS and word in ("", None):
        return "unset"
    assert guard(name) is not None, "%s reaches an env file and no check of preflight's guards it" % name
    if not guard(name)(value):
        return "refused"
    if (content, name) not in _PLAIN_ENV:
        _PLAIN_ENV[content, name] = _env_file(content, name, wrap(plain_word))
    got, plain = _env_file(content, name, value), _PLAIN_ENV[content, name]
    assert sorted(got) == sorted(plain), (name, value, sorted(got), sorted(plain))
    if name.endswith("_env"):
        assert got["SPARKFLEET_TEST"] == str(word), (name, value, got["SPARKFLEET_TEST"])
    return "rendered"


def test_the_env_files_are_found_and_their_inputs_guarded():
    assert sorted(n for _r, n, _c in ENV_FILES) == ["ray-client.env", "ray.env", "vllm.env"], ENV_FILES
    assert {"vllm_serve_env", "ray_cluster_env", "vllm_serve_api_key"} <= {v_ for *_x, v_ in ENV_REACHES}
    assert not [(n, v_) for _r, n, _c, v_ in ENV_REACHES if guard(v_) is None]


@pytest.mark.bad_input(name="hostile values for every variable that reaches ray.env, ray-client.env or vllm.env",
                       expected="refused by preflight's check, or docker reads the same variables, the value intact")
@pytest.mark.parametrize("role, file, content, name", ENV_REACHES, ids=["%s:%s" % (e[1], e[3]) for e in ENV_REACHES])
def test_every_hostile_value_is_refused_or_the_env_file_reads_the_same(role, file, content, name):
    outcome = [judge_env(content, name, word) for word in HOSTILE]
    assert judge_env(content, name, _wrap(name)[1]) == "rendered", name
    assert "refused" in outcome or name.endswith("_env"), name


# ---- the forced commands written into authorized_keys (the shell runs them on a worker as the sync user)

def _key_options(line):
    """sshd's reading of an authorized_keys line's options (sshauthopt.c): up to the first blank outside quotes,
    split at commas outside quotes; inside quotes a backslash keeps a quote. [(name, value or None)], and the rest."""
    opts, i, cur, quoted = [], 0, "", False
    while i < len(line) and (quoted or line[i] not in " \t"):
        c = line[i]
        if quoted and c == "\\" and line[i + 1:i + 2] == '"':
            cur += '"'
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c == "," and not quoted:
            opts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    assert not quoted, "an option's quote is never closed: %r" % line
    opts.append(cur)
    return [tuple(o.split("=", 1)) if "=" in o else (o, None) for o in opts], line[i:].strip()


def _model_sync_key_line(**over):
    tasks = yaml.safe_load((REPO / "roles/model_sync/tasks/main.yml").read_text())
    source = next(e["line"] for t in tasks for e in (t.get("vars") or {}).get("_model_sync_worker_files", [])
                  if isinstance(e, dict) and e.get("state") == "line")
    over.setdefault("hostvars", {"spark-1": {"_model_sync_pub_key": "ssh-ed25519 AAAAC3Nz sparkfleet model sync"}})
    return r.variables(**over).template(r.trust_as_template(source))


KEY_LINE_VARS = ("model_sync_forced_command", "model_sync_dest", "model_sync_allowed_commands", "sparkfleet_fabric_subnet")


@pytest.mark.bad_input(name="hostile paths and subnet in model_sync's authorized_keys line (its forced command)",
                       expected="refused by preflight's check, or sshd reads the same options and the shell the same "
                                "four words")
@pytest.mark.parametrize("name", KEY_LINE_VARS)
def test_the_sync_key_s_forced_command_is_refused_or_the_same_words(name, observe):
    plain = r.value_of(r.variables(), name)
    counts = {"refused": 0, "rendered": 0}
    for word in HOSTILE + ["/srv/it's here", "/srv/a\"b", "/srv/$(id)", plain]:
        if not guard(name)(word):
            counts["refused"] += 1
            continue
        opts, key = _key_options(_model_sync_key_line(**{name: word}))
        assert [o[0] for o in opts] == ["restrict", "agent-forwarding", "from", "command"], opts
        assert key == "ssh-ed25519 AAAAC3Nz sparkfleet model sync"
        values = {n: r.value_of(r.variables(**{name: word}), n) for n in KEY_LINE_VARS}
        assert dict(opts)["from"] == '%s' % values["sparkfleet_fabric_subnet"]
        assert shlex.split(dict(opts)["command"]) == ["/usr/bin/python3", values["model_sync_forced_command"],
                                                      values["model_sync_dest"], values["model_sync_allowed_commands"]]
        counts["rendered"] += 1
    assert counts["refused"] and counts["rendered"], counts
    observe("%s: %d refused, %d rendered intact" % (name, counts["refused"], counts["rendered"]))


def _image_key_options(**over):
    """runtime_image's authorized_keys options (distribute.yml's task vars), as sshd reads them."""
    tasks = yaml.safe_load((REPO / "roles/runtime_image/tasks/distribute.yml").read_text())
    task = next(t for t in tasks if "_runtime_image_key_options" in (t.get("vars") or {}))
    t = r.variables(**over)
    flat = []
    for option in task["vars"]["_runtime_image_key_options"]:
        flat.extend(option if isinstance(option, list) else [t.template(r.trust_as_template(option))])
    return _key_options(",".join(flat) + " ssh-ed25519 AAAA sparkfleet image sync")


@pytest.mark.parametrize("name", ["runtime_image_load_command", "runtime_image_name", "sparkfleet_fabric_subnet"])
def test_the_image_key_s_forced_command_is_refused_or_the_same_words(name):
    plain = r.value_of(r.variables(), name)
    rendered_ = 0
    for word in HOSTILE + [plain]:
        if not guard(name)(word):
            continue
        opts, _key = _image_key_options(**{name: word, "_runtime_image_head_content": "sha256:" + "c" * 64})
        assert [o[0] for o in opts] == ["command", "from", "no-pty", "no-port-forwarding", "no-agent-forwarding",
                                        "no-X11-forwarding"], opts
        values = {n: r.value_of(r.variables(**{name: word}), n) for n in
                  ("runtime_image_load_command", "runtime_image_name")}
        assert shlex.split(dict(opts)["command"]) == values["runtime_image_load_command"].split() + [
            "--name", values["runtime_image_name"], "--content", "sha256:" + "c" * 64]
        rendered_ += 1
    assert rendered_
