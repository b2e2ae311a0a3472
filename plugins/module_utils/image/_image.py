# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Pure helpers for image_check and image_sync: ask a runtime image what it ships (vLLM, Ray, model
architectures, `vllm serve` flags), judge it against a model and a command line, parse `docker load`.

Private to the collection. Free of AnsibleModule so it can be unit tested on captured outputs.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re

from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json

PROBE_MARK = "SPARKFLEET-IMAGE-PROBE "
PROBE_FORMAT = 4
# Answers parse_probe reads: format 3 (before the package imports) lacks "packages"; a recipe item needing a package is
# then not used. The module's cache only keeps answers of PROBE_FORMAT, so a cached format 3 is asked again.
PROBE_FORMATS_READ = (3, 4)

# What our own scripts run inside the runtime image besides `vllm serve`, by the interpreter each of them finds there,
# and what that interpreter must import: (how it is found, what it imports, who runs it). "python3" is the first
# python3 on the image's PATH (what `docker exec C python3` and `docker run --entrypoint python3` run); "ray" is the
# interpreter the first line of the image's `ray` command names (the Ray unit's --entrypoint ray, `ray status`). A
# name "module:attr" must also have that attribute. The probe (below) asks each interpreter in the image itself.
IMAGE_INTERPRETERS = (
    ("python3", ("ray", "ray._raylet:GcsClient", "ray.util.scheduling_strategies:NodeAffinitySchedulingStrategy"),
     "sparkfleet-wait gpus (vLLM's wait for the cluster's GPUs), sparkfleet-ray-guard (our identity in Ray's GCS), "
     "the Ray watchdog's GCS read and ray_cluster_check"),
    ("ray", ("ray", "ray.scripts.scripts:main"),
     "the Ray unit (--entrypoint ray: ray start) and the head watchdog's ray status"),
)

# Packages a `vllm serve` flag needs beyond vLLM itself, which the probe imports under the interpreter the image's `vllm`
# command runs under (the one the engine runs): --load-format fastsafetensors parses on every 0.17.x but fails at
# weight load without the fastsafetensors package (vLLM imports it lazily).
PROBE_PACKAGES = ("fastsafetensors",)

# Run inside the image by the interpreter its `vllm` command runs under (LAUNCHER below), never "the first python3 on
# PATH": an image may put a system python without vLLM first (NGC images, a venv image with /usr/bin early on PATH).
# It asks vLLM's own objects: the version, the model registry, the parser `vllm serve` builds (FlexibleArgumentParser
# moved from vllm.utils to vllm.utils.argparse_utils in 0.11; both are tried) and the names in vLLM's reasoning and
# tool-call parser registries (the values --reasoning-parser and --tool-call-parser take; the parser does not list
# them as choices). Every part fails on its own, so an image without Ray still reports its vLLM and the reverse.
PROBE = r'''
import json, os, sys
out = {"format": %d, "python": sys.version.split()[0], "executable": sys.executable,
       "vllm_entrypoint": os.environ.get("SPARKFLEET_VLLM_ENTRYPOINT") or None,
       "vllm_interpreter": os.environ.get("SPARKFLEET_VLLM_INTERPRETER") or None}
try:
    import vllm
    out["vllm"] = str(vllm.__version__)
except Exception as e:
    out["vllm_error"] = "%%s: %%s" %% (type(e).__name__, e)
try:
    import ray
    out["ray"] = str(ray.__version__)
except Exception as e:
    out["ray_error"] = "%%s: %%s" %% (type(e).__name__, e)
try:
    from vllm.model_executor.models import ModelRegistry
    out["architectures"] = sorted(ModelRegistry.get_supported_archs())
except Exception as e:
    out["architectures_error"] = "%%s: %%s" %% (type(e).__name__, e)
try:
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    parser = make_arg_parser(FlexibleArgumentParser())
    flags = {}
    for action in parser._actions:
        choices = sorted(str(c) for c in action.choices) if action.choices else None
        for opt in action.option_strings:
            flags[opt] = {"choices": choices, "takes_value": action.nargs != 0}
    out["flags"] = flags
except Exception as e:
    out["flags_error"] = "%%s: %%s" %% (type(e).__name__, e)
def registry(modules, manager):
    for name in modules:
        try:
            mod = __import__(name, fromlist=[manager])
        except ImportError:
            continue
        m = getattr(mod, manager)
        names = set()
        for attr in ("tool_parsers", "reasoning_parsers", "lazy_parsers"):
            names.update(getattr(m, attr, None) or {})
        return sorted(str(n) for n in names)
    raise ImportError("no %%s in %%s" %% (manager, ", ".join(modules)))
for key, modules, manager in (
        ("tool_parsers", ("vllm.tool_parsers", "vllm.entrypoints.openai.tool_parsers"), "ToolParserManager"),
        ("reasoning_parsers", ("vllm.reasoning",), "ReasoningParserManager")):
    try:
        out[key] = registry(modules, manager)
    except Exception as e:
        out[key + "_error"] = "%%s: %%s" %% (type(e).__name__, e)
@INTERPRETERS@
out["packages"] = {}
for name in PACKAGES:
    try:
        found = __import__(name)
        out["packages"][name] = {"version": str(getattr(found, "__version__", "") or "") or None}
    except Exception as e:
        out["packages"][name] = {"error": "%%s: %%s" %% (type(e).__name__, e)}
sys.stdout.write("\n%s" + json.dumps(out, sort_keys=True) + "\n")
''' % (PROBE_FORMAT, PROBE_MARK)

# Part of the probe: each interpreter of IMAGE_INTERPRETERS, found as our scripts find it (the image's PATH, a
# command's first line), imports what our scripts need there: in the probe's own process when it is the interpreter
# the probe runs under, else in a child (bounded; its answer is one marked JSON line).
_CHECK = r'''
import importlib, json, sys
missing = {}
for need in json.loads(sys.argv[1]):
    mod, _, attr = need.partition(":")
    try:
        found = importlib.import_module(mod)
        if attr:
            getattr(found, attr)
    except Exception as e:
        missing[need] = "%s: %s" % (type(e).__name__, e)
sys.stdout.write("\nSPARKFLEET-IMPORTS " + json.dumps({"executable": sys.executable,
                 "python": sys.version.split()[0], "missing": missing}) + "\n")
'''
_INTERPRETERS = r'''
import shutil, subprocess
def _shebang(path):
    try:
        with open(path, "rb") as handle:
            head = handle.read(512).decode("utf-8", "replace").splitlines() + ["", ""]
    except OSError as e:
        return None, "%s: %s" % (type(e).__name__, e)
    if head[0].startswith(("#!/bin/sh", "#!/usr/bin/sh")) and head[1].startswith("\'\'\'exec\' "):
        return [head[1][len("\'\'\'exec\' "):].split(" \"", 1)[0]], None
    if head[0].startswith("#!"):
        return head[0][2:].split(), None
    return None, "%s is not a script (no #! line)" % path
def _imports(argv, needs):
    if argv == [sys.executable]:
        ns = {}
        saved = sys.argv, sys.stdout
        try:
            import io
            sys.argv, sys.stdout = ["-", json.dumps(needs)], io.StringIO()
            exec(CHECK, ns)
            text = sys.stdout.getvalue()
        finally:
            sys.argv, sys.stdout = saved
    else:
        try:
            p = subprocess.run(argv + ["-c", CHECK, json.dumps(needs)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=90)
        except Exception as e:
            return {"error": "%s: %s" % (type(e).__name__, e)}
        text = p.stdout.decode("utf-8", "replace")
        if "SPARKFLEET-IMPORTS " not in text:
            return {"error": "it printed no answer (rc %d): %s" % (
                p.returncode, p.stderr.decode("utf-8", "replace").strip()[-300:])}
    return json.loads(text.rsplit("SPARKFLEET-IMPORTS ", 1)[1].splitlines()[0])
out["interpreters"] = []
for use, needs in USES:
    entry = {"use": use, "command": shutil.which(use), "interpreter": None}
    if entry["command"] is None:
        entry["error"] = "no %s on the image's PATH" % use
    elif use == "python3":
        argv = [entry["command"]]
    else:
        argv, why = _shebang(entry["command"])
        if why:
            entry["error"] = why
        if argv and argv[0].endswith("/env") and len(argv) > 1:
            argv = [shutil.which(argv[1]) or argv[1]] + argv[2:]
    if not entry.get("error"):
        entry["interpreter"] = " ".join(argv)
        entry.update(_imports(argv, list(needs)))
    out["interpreters"].append(entry)
'''
PROBE = PROBE.replace("@INTERPRETERS@", "PACKAGES = %r\nCHECK = %r\nUSES = %r\n" % (
    list(PROBE_PACKAGES), _CHECK, [(use, list(needs)) for use, needs, _who in IMAGE_INTERPRETERS]) + _INTERPRETERS)

# `docker run --entrypoint sh IMAGE -c LAUNCHER sparkfleet-probe PROBE`: find the `vllm` command on the image's PATH
# and run the probe under the interpreter its first line names (`#!/opt/venv/bin/python3`, `#!/usr/bin/env python3`,
# or pip's two-line `#!/bin/sh` + `'''exec' /long/path/python "$0" "$@"` for long paths). Without a `vllm` command
# (or with a binary one) it falls back to python3 on PATH, and the probe says so.
LAUNCHER = r"""
probe=$1 v= interp= whole=
if v=$(command -v vllm 2>/dev/null) && [ -f "$v" ]; then
  { IFS= read -r l1; IFS= read -r l2; } < "$v" || true
  case $l1 in
    "#!/bin/sh"* | "#!/usr/bin/sh"*)
      case $l2 in "'''exec' "*) l2=${l2#"'''exec' "}; interp=${l2%% \"*}; whole=1 ;; esac ;;
    "#!"*) interp=${l1#??} ;;
  esac
fi
export SPARKFLEET_VLLM_ENTRYPOINT="$v" SPARKFLEET_VLLM_INTERPRETER="$interp"
if [ -n "$whole" ]; then
  exec "$interp" -c "$probe"
elif [ -n "$interp" ]; then
  exec $interp -c "$probe"
fi
exec python3 -c "$probe"
"""

# Values a release accepts that its parser does not list as choices (vLLM validates them later, at engine init).
# (flag, lowest version, first version without the rule, accepted values)
KNOWN_VALUES = (
    ("--safetensors-load-strategy", (0, 17), (0, 18), ("eager", "lazy", "torchao")),
)

# Which loader speeds a GB10 up, per vLLM release (shown in the verdict's hint and the docs).
LOADER_ADVICE = ("vLLM 0.17.x: --safetensors-load-strategy eager (reads each shard whole instead of mmap page faults); "
                 "--load-format fastsafetensors only when the fastsafetensors package is in the image")


class ProbeError(Exception):
    """The probe's output could not be read; msg says why."""


def image_id_key(image_id):
    """The cache file stem for an image ID (sha256:<hex> -> <hex>); None for anything else."""
    m = re.match(r"^(?:sha256:)?([0-9a-f]{64})$", (image_id or "").strip())
    return m.group(1) if m else None


def parse_probe(stdout):
    """The probe's JSON from a container's stdout (vLLM may log before it); raises ProbeError."""
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(PROBE_MARK):
            try:
                facts = _json.loads(line[len(PROBE_MARK):], "the probe's answer")
            except ValueError as exc:
                raise ProbeError("the probe's answer is not JSON: %s" % exc)
            if not isinstance(facts, dict) or facts.get("format") not in PROBE_FORMATS_READ:
                raise ProbeError("the probe's answer has an unknown format: %r" % (line[:200],))
            return facts
    raise ProbeError("the image printed no probe answer (is there a `vllm` command, or python3, on its PATH?)")


def parse_version(text):
    """'0.17.1rc1.dev3+g1234' -> (0, 17, 1); None when there is no leading number."""
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", str(text or ""))
    if not m:
        return None
    return tuple(int(x) for x in m.group(1).split("."))


def _version_lt(found, wanted):
    a, b = parse_version(found), parse_version(wanted)
    if a is None or b is None:
        return False
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)) < b + (0,) * (n - len(b))


def argv_flags(argv):
    """[(flag, value or None)] of a `vllm serve` argument list (after `serve`); positionals are skipped.

    A value is the next word unless the flag is written --flag=value or the next word is another flag.
    """
    out = []
    words = [str(w) for w in argv or []]
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-") and len(w) > 1 and not _is_number(w):
            if "=" in w:
                flag, value = w.split("=", 1)
                out.append((flag, value))
            elif i + 1 < len(words) and not (words[i + 1].startswith("-") and not _is_number(words[i + 1])):
                out.append((w, words[i + 1]))
                i += 1
            else:
                out.append((w, None))
        i += 1
    return out


def _is_number(word):
    try:
        float(word)
        return True
    except ValueError:
        return False


def judge(facts, serve_args=None, architectures=None, min_vllm_version=None, min_ray_version=None):
    """Problems (list of str, empty when the image fits) of an image's probe facts for a model and command line.

    serve_args: the words after `vllm serve`; architectures: the model's config.json `architectures`.
    """
    problems = []
    version = facts.get("vllm")
    if "vllm_entrypoint" in facts and not facts.get("vllm_entrypoint"):
        problems.append("no `vllm` command on the image's PATH (the units start the image with --entrypoint vllm)")
    if not version:
        problems.append("no usable vLLM in the image (%s, under %s)" % (
            facts.get("vllm_error") or "import vllm failed", facts.get("executable") or "python3"))
    elif min_vllm_version and _version_lt(version, min_vllm_version):
        problems.append("vLLM %s is older than %s" % (version, min_vllm_version))
    ray = facts.get("ray")
    if not ray:
        problems.append("no Ray in the image (%s); the cluster needs Ray inside the vLLM image"
                        % (facts.get("ray_error") or "import ray failed"))
    elif min_ray_version and _version_lt(ray, min_ray_version):
        problems.append("Ray %s is older than %s" % (ray, min_ray_version))

    problems.extend(interpreter_problems(facts))

    if architectures:
        known = facts.get("architectures")
        if known is None:
            problems.append("could not read vLLM's model registry (%s)" % facts.get("architectures_error"))
        elif not any(a in known for a in architectures):
            near = sorted({m for a in architectures for m in difflib.get_close_matches(a, known, n=3, cutoff=0.6)})
            problems.append("the model's architectures %s are not in this vLLM's registry%s"
                            % (list(architectures), " (closest: %s)" % ", ".join(near) if near else ""))

    if serve_args:
        flags = facts.get("flags")
        if flags is None:
            problems.append("could not read `vllm serve`'s arguments (%s)" % facts.get("flags_error"))
        else:
            problems.extend(_flag_problems(flags, serve_args, version))
            problems.extend(_parser_problems(facts, serve_args, version))
    return problems


def interpreter_problems(facts):
    """What an interpreter our scripts run in the image lacks (IMAGE_INTERPRETERS), one problem per interpreter, naming
    it, what it could not import and who runs it. Nothing when the probe did not look (an answer without the key)."""
    who = dict((use, runs) for use, _needs, runs in IMAGE_INTERPRETERS)
    problems = []
    for entry in facts.get("interpreters") or []:
        use = entry.get("use")
        where = "%s on the image's PATH" % use if use == "python3" else "the image's `%s` command" % use
        if entry.get("error"):
            problems.append("%s: %s; %s run it in the image" % (where, entry["error"], who.get(use, "our scripts")))
            continue
        missing = entry.get("missing") or {}
        if missing:
            first = sorted(missing)[0]
            what = ", ".join(x for x in (entry.get("interpreter"), entry.get("python") and "Python " + entry["python"])
                             if x)
            problems.append("%s (%s) cannot import %s (%s); %s run it in the image" % (
                where if use == "python3" else "the interpreter of the image's `%s` command" % use, what,
                ", ".join(n.replace(":", ".") for n in sorted(missing)), missing[first], who.get(use, "our scripts")))
    return problems


# `vllm serve` flags whose value names an entry of one of vLLM's parser registries (not argparse choices: plugins may
# register more), with the probe's key for that registry.
REGISTRY_FLAGS = (("--tool-call-parser", "tool_parsers", "tool-call parser"),
                  ("--reasoning-parser", "reasoning_parsers", "reasoning parser"))


def _parser_problems(facts, serve_args, version):
    problems = []
    given = dict(argv_flags(serve_args))
    for flag, key, label in REGISTRY_FLAGS:
        value = given.get(flag)
        if value is None:
            continue
        names = facts.get(key)
        if names is None:
            problems.append("could not read vLLM's %s registry to check %s %s (%s)" % (
                label, flag, value, facts.get(key + "_error")))
        elif value not in names:
            near = difflib.get_close_matches(value, names, n=3, cutoff=0.6)
            problems.append("vLLM %s registers no %s %r%s" % (
                version, label, value, " (closest: %s)" % ", ".join(near) if near else ""))
    if "--enable-auto-tool-choice" in given and given.get("--tool-call-parser") is None:
        problems.append("--enable-auto-tool-choice needs --tool-call-parser (vLLM refuses to start without it)")
    return problems


def _flag_problems(flags, serve_args, version):
    problems = []
    v = parse_version(version) or ()
    for flag, value in argv_flags(serve_args):
        spec = flags.get(flag)
        if spec is None:
            near = difflib.get_close_matches(flag, list(flags), n=1, cutoff=0.8)
            problems.append("`vllm serve` of vLLM %s does not accept %s%s" % (
                version, flag, " (did you mean %s?)" % near[0] if near else ""))
            continue
        if value is None or not spec.get("takes_value", True):
            continue
        allowed = spec.get("choices")
        if not allowed:
            for name, low, high, values in KNOWN_VALUES:
                if name == flag and low <= v[:len(low)] < high:
                    allowed = list(values)
        if allowed and value not in allowed:
            problems.append("vLLM %s accepts %s %s only, not %r" % (version, flag, "|".join(allowed), value))
    return problems


def summary(facts):
    """One line: what the image ships."""
    return "vLLM %s, Ray %s, %s architectures, %s serve flags" % (
        facts.get("vllm") or "missing", facts.get("ray") or "missing",
        len(facts.get("architectures") or []), len(facts.get("flags") or {}))


# ------------------------------------------------------------------------------------------- image identity
# Two daemons hold "the same image" when its content matches, whatever local ID each gives it: Docker's containerd
# image store names an image by its manifest (or index) digest, the classic store by its config digest, and a
# `docker save | docker load` between them (or between two containerd stores, for a single platform of a
# multi-platform image) gives another ID (moby #44833, #48401). The content identity below survives that: the
# platform, the layers' diff IDs (RootFS.Layers: digests of the uncompressed layers, the same in both stores) and the
# run configuration (an image built FROM another with only ENV or ENTRYPOINT changed has the same layers).
CONTENT_CONFIG_KEYS = ("User", "Env", "Entrypoint", "Cmd", "WorkingDir", "Labels", "Volumes", "ExposedPorts",
                       "StopSignal")
# The first Docker API that takes `docker save --platform` (Docker 28): older daemons save what they hold.
SAVE_PLATFORM_API = (1, 48)


def _empty(value):
    return value is None or value is False or value == "" or value == [] or value == {}


def image_platform(inspect):
    """'linux/arm64/v8' of one `docker image inspect` entry ('' when the daemon does not say)."""
    parts = [inspect.get("Os") or "", inspect.get("Architecture") or "", inspect.get("Variant") or ""]
    return "/".join(p for p in parts if p) if parts[0] and parts[1] else ""


def content_identity(inspect):
    """'sha256:<hex>' naming an image's content (platform, layer diff IDs, run configuration), from one entry of
    `docker image inspect`; the same on every daemon that holds that image, whatever its local ID there.

    Raises ValueError when the entry has no layers (not an image inspect answer).
    """
    if not isinstance(inspect, dict):
        raise ValueError("not an image inspect entry: %r" % (inspect,))
    layers = (inspect.get("RootFS") or {}).get("Layers")
    if not isinstance(layers, list) or not layers:
        raise ValueError("image %s lists no layers (RootFS.Layers)" % inspect.get("Id"))
    config = inspect.get("Config") or {}
    canon = {"platform": image_platform(inspect), "layers": [str(x) for x in layers],
             "config": {k: config[k] for k in CONTENT_CONFIG_KEYS if not _empty(config.get(k))}}
    text = json.dumps(canon, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def image_summary(inspect):
    """What a node holds: {id, content, platform, tags, repo_digests, layers} of one `docker image inspect` entry."""
    return {"id": inspect.get("Id") or "", "content": content_identity(inspect), "platform": image_platform(inspect),
            "tags": list(inspect.get("RepoTags") or []), "repo_digests": list(inspect.get("RepoDigests") or []),
            "layers": len((inspect.get("RootFS") or {}).get("Layers") or [])}


def same_image(a, b):
    """Whether two image summaries name the same image: a shared repo digest, or the same content identity."""
    if set(a.get("repo_digests") or []) & set(b.get("repo_digests") or []):
        return True
    return bool(a.get("content")) and a.get("content") == b.get("content")


def parse_inspect(stdout):
    """The list `docker image inspect` prints (JSON); raises ValueError on anything else."""
    data = _json.loads(stdout or "", "docker image inspect's output")
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise ValueError("docker image inspect did not print a list of images")
    return data


def api_version(text):
    """(1, 48) of a daemon's `docker version --format {{.Server.APIVersion}}`; None when unreadable."""
    m = re.match(r"^\s*(\d+)\.(\d+)\s*$", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def save_platform_args(daemon_api, platform):
    """`docker save` arguments naming the platform, where the daemon takes them (API >= 1.48); else []."""
    if daemon_api and tuple(daemon_api) >= SAVE_PLATFORM_API and platform:
        return ["--platform", platform]
    return []


DIGEST_REF_RE = re.compile(r"^(?P<name>[^@\s]+)@(?P<algo>[A-Za-z0-9_+.-]+):(?P<hex>\S*)$")


def image_ref_problem(ref):
    """Why an image reference pinned by digest is not usable (a placeholder, a short digest), else None.

    A reference without '@' is a tag: it is not refused here (the lab's images have no registry digest).
    """
    m = DIGEST_REF_RE.match((ref or "").strip())
    if not m:
        return None
    if m.group("algo") != "sha256" or not re.match(r"^[0-9a-f]{64}$", m.group("hex")):
        return "%s is not a pinned digest (expected NAME@sha256:<64 hex digits>)" % ref
    return None


_LOADED_ID_RE = re.compile(r"^Loaded image ID: (sha256:[0-9a-f]{64})\s*$", re.M)
_LOADED_TAG_RE = re.compile(r"^Loaded image: (\S+)\s*$", re.M)


def parse_docker_load(stdout):
    """{'tags': [...], 'ids': [...]} from `docker load` output (tagged images print the tag, others the ID)."""
    return {"tags": _LOADED_TAG_RE.findall(stdout or ""), "ids": _LOADED_ID_RE.findall(stdout or "")}


# ------------------------------------------------------------------------------------------- transfer progress
# image_sync writes one header line per destination into its progress file, then `dd status=progress` (coreutils,
# C locale) appends "<bytes> bytes (<human>) copied, <seconds> s, <rate>" about once a second, each ended by \r;
# the last line (after the records counts) ends with \n. transfer_progress reads it while the transfer runs.
PROGRESS_HEADER = "# sparkfleet transfer "
_DD_COPIED = re.compile(r"(\d+) bytes(?: \([^)]*\))? copied, ([0-9.]+) s")


def progress_header(name, ip, total, index, count):
    """The line image_sync writes before streaming to one destination."""
    return PROGRESS_HEADER + json.dumps({"name": name, "ip": ip, "total": int(total), "index": int(index),
                                         "count": int(count)}, sort_keys=True) + "\n"


def parse_progress(text):
    """A progress file -> {name, ip, total, index, count, bytes, seconds} ({} when there is no header yet)."""
    state = {}
    for line in text.replace("\r", "\n").split("\n"):
        if line.startswith(PROGRESS_HEADER):
            try:
                head = _json.loads(line[len(PROGRESS_HEADER):], "the progress header")
            except ValueError:
                continue
            state = dict(head, bytes=0, seconds=0.0)
            continue
        m = _DD_COPIED.search(line)
        if m and state:
            state.update(bytes=int(m.group(1)), seconds=float(m.group(2)))
    return state


def progress_summary(state):
    """One line for a person: 'spark-2 (1/1): 2.8 of 3.0 GB (92%), 552 MB/s, about 1 s left'."""
    if not state:
        return "no destination under way"
    done, total, secs = state.get("bytes", 0), state.get("total") or 0, state.get("seconds") or 0.0
    rate = done / secs if secs > 0 else 0.0
    who = "%s (%d/%d)" % (state.get("name") or state.get("ip"), state.get("index", 1), state.get("count", 1))
    if total and done >= total:
        # docker save's tar is a little larger than the image's size; the rest is docker load finishing
        text = "%s: %.1f GB sent (image %.1f GB), loading" % (who, done / 1e9, total / 1e9)
    else:
        text = "%s: %.1f of %.1f GB" % (who, done / 1e9, total / 1e9)
        if total:
            text += " (%d%%)" % int(done * 100 / total)
    if rate:
        text += ", %.0f MB/s" % (rate / 1e6)
        if total > done:
            text += ", about %d s left" % int((total - done) / rate + 0.5)
    return text


# ------------------------------------------------------------------------------------------- serving recipe
def recipe_verdicts(facts, recipe, serve_args=None, architectures=None):
    """Which items of a serving recipe this image proves, each item's verdict in order.

    recipe: [{variable, args, packages, architectures}]: the words an item adds after `vllm serve`, the packages its
    flags need inside the image (PROBE_PACKAGES), and the model architectures it is for (empty: any model). Returns
    [{variable, args, used, why}]: used items are proven (every flag and value accepted by the image's vLLM, every
    package importable by its interpreter, the model one it is for); why names what was missing, else ''. An item
    whose flag serve_args already sets is not used (the operator's own setting wins). The model's architectures
    unknown (its config not there yet) do not drop an item: the check once the model is there decides.
    """
    flags = facts.get("flags")
    version = facts.get("vllm")
    packages = facts.get("packages")
    given = set(flag for flag, _value in argv_flags(serve_args))
    out = []
    for item in recipe or []:
        args = [str(a) for a in item.get("args") or []]
        why = []
        mine = [flag for flag, _value in argv_flags(args)]
        already = [f for f in mine if f in given]
        if already:
            why.append("%s is set already by the command line's own settings, which are kept"
                       % ", ".join(already))
        elif flags is None:
            why.append("could not read `vllm serve`'s arguments (%s)" % facts.get("flags_error"))
        else:
            why.extend(_flag_problems(flags, args, version))
        for name in item.get("packages") or []:
            found = (packages or {}).get(name)
            if packages is None:
                why.append("the probe did not ask for the %s package" % name)
            elif not found or found.get("error"):
                why.append("the image's vLLM (%s) cannot import %s (%s)" % (
                    facts.get("executable") or "python3", name,
                    (found or {}).get("error") or "not probed"))
        wanted = [str(a) for a in item.get("architectures") or []]
        if wanted and architectures and not any(a in wanted for a in architectures):
            why.append("the model's architectures %s are none of %s" % (list(architectures), ", ".join(wanted)))
        out.append({"variable": str(item.get("variable") or ""), "args": args, "used": not why,
                    "why": "; ".join(why)})
    return out


def recipe_args(verdicts):
    """The words the proven items add after `vllm serve`, in the recipe's order."""
    return [w for v in verdicts if v["used"] for w in v["args"]]


def recipe_warning(image, verdict):
    """The warning for an item the image does not prove: the variable, the flags dropped and why."""
    return ("%s: %s dropped (%s): %s; vLLM starts without it. Turn %s off to silence this, or use an image "
            "that has it" % (image, verdict["variable"], " ".join(verdict["args"]), verdict["why"], verdict["variable"]))
