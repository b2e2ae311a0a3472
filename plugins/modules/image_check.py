#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_check
short_description: Check a vLLM runtime image can serve a model with the given flags, before anything starts
version_added: 0.2.0
description:
  - Asks the image itself what it ships, in one short container (C(docker run --rm --network none
    --entrypoint sh IMAGE -c LAUNCHER)) - the vLLM version, the Ray version, the model architectures vLLM's
    registry knows (C(ModelRegistry.get_supported_archs())), every option of the parser C(vllm serve) builds
    (C(make_arg_parser)) with its choices, and the names in vLLM's tool-call and reasoning parser registries.
  - The probe runs under the interpreter the image's C(vllm) command runs under (the first line of the C(vllm) found on
    the image's PATH), not whatever C(python3) comes first on PATH, which in some images is a system Python without
    vLLM.
  - Also asks each other interpreter our own scripts run inside the image whether it imports what they need there.
    The first C(python3) on the image's PATH (C(sparkfleet-wait gpus), C(sparkfleet-ray-guard), the Ray watchdog's GCS
    read and M(sparkfleet.vllm.ray_cluster_check) run C(docker exec CONTAINER python3)) must import C(ray) with
    C(ray._raylet.GcsClient) and C(NodeAffinitySchedulingStrategy); the interpreter of the image's C(ray) command (the
    Ray unit's C(--entrypoint ray), C(ray status)) must import C(ray) and its CLI. An image whose C(vllm) runs under a
    venv while C(python3) on its PATH is a system Python without Ray fails here, not at the first GPU wait.
  - Fails, naming the image, the versions found, what is missing and the fix, when vLLM or Ray is missing or
    older than asked, when none of the model's C(config.json) C(architectures) is registered, or when a flag of
    O(serve_args) is unknown to that vLLM or its value is not one the release accepts (for example
    C(--safetensors-load-strategy) on vLLM 0.17.x takes C(lazy), C(eager) or C(torchao) only; C(--tool-call-parser)
    and C(--reasoning-parser) must name a parser the image's vLLM registers, and C(--enable-auto-tool-choice) needs
    C(--tool-call-parser)), or when the image has no C(vllm) command on its PATH.
  - An image too old for the model otherwise fails only at model init, minutes into a deployment.
  - The probe's answer is cached per image ID under O(cache_dir), so re-runs cost one C(docker image inspect).
  - "Which loader speeds a GB10: vLLM 0.17.x C(--safetensors-load-strategy eager) (whole-shard reads instead of
    mmap page faults); C(--load-format fastsafetensors) only when the C(fastsafetensors) package is in the
    image (this check rejects flags and values the image does not accept)."
  - Changes nothing on the node except the cache file.
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  image:
    description:
      - The runtime image (tag or ID); it must already be on this node.
    type: str
    required: true
  serve_args:
    description:
      - The words after C(vllm serve) that will be passed (the model path first), as the
        C(sparkfleet.vllm.vllm_serve_args) filter renders them.
      - Every C(--flag) must be accepted by the image's vLLM; values of flags with choices must be one of them.
    type: list
    elements: str
    default: []
  recipe:
    description:
      - Optional flags (a serving recipe), each used only where this image proves it, else dropped with a warning
        naming its variable, its flags and what the image lacks; never a failure.
      - An item is used when the image's vLLM accepts each of its flags and values, the interpreter the image's
        C(vllm) command runs under imports each of its O(recipe[].packages), the model is one of its
        O(recipe[].architectures) (when the model's config is there), and O(serve_args) does not set its flag already.
      - The words of the items used come back in RV(recipe_args), to be added after O(serve_args).
    type: list
    elements: dict
    default: []
    suboptions:
      variable:
        description: The setting the item comes from, named in the warning and in RV(recipe).
        type: str
        required: true
      args:
        description: The words it adds after C(vllm serve), for example C([--kv-cache-dtype, fp8]).
        type: list
        elements: str
        required: true
      packages:
        description:
          - Python packages its flags need inside the image (the probe imports C(fastsafetensors)).
        type: list
        elements: str
        default: []
      architectures:
        description: Model architectures it is for (C(config.json) C(architectures)); empty, any model.
        type: list
        elements: str
        default: []
  model_config:
    description:
      - Path of the model's C(config.json) on this node; its C(architectures) must be in vLLM's registry.
      - When the file does not exist yet (the model is downloaded later), the architecture check is skipped
        with a warning unless O(require_model=true).
    type: path
  require_model:
    description:
      - Fail when O(model_config) does not exist.
    type: bool
    default: false
  min_vllm_version:
    description:
      - Oldest vLLM release accepted (for example V(0.17.1), the first with Qwen3.5).
    type: str
  min_ray_version:
    description:
      - Oldest Ray release accepted (for example V(2.52), the first with token authentication).
    type: str
  cache_dir:
    description:
      - Directory (root-owned, created when missing) where the probe's answer is kept per image ID.
    type: path
    default: /var/lib/sparkfleet/image-checks
  timeout:
    description:
      - Seconds the probe container may take (importing vLLM takes some seconds on a GB10); at least 1.
    type: int
    default: 180
notes:
  - Needs C(docker) on the node. The probe runs without network and without GPU.
  - Check mode is supported; the probe still runs (it is read-only) but the cache is not written.
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
  - sparkfleet.vllm.setting_names
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Check the image before anything starts
  sparkfleet.vllm.image_check:
    image: hellohal2064/vllm-qwen3.5-gb10:latest
    model_config: /home/nvidia/models/Qwen3.5-122B-A10B-FP8/config.json
    serve_args: "{{ _serve_cfg | sparkfleet.vllm.vllm_serve_args }}"
    min_vllm_version: "0.17.1"
    min_ray_version: "2.52"
"""

RETURN = r"""
image:
  description: The image as given.
  returned: always
  type: str
image_id:
  description: The image's ID on this node.
  returned: success
  type: str
  sample: sha256:8f0c6e0d5b4f3c2a1e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f
vllm_version:
  description: vLLM version inside the image (null when missing).
  returned: success
  type: str
  sample: 0.17.1rc1
ray_version:
  description: Ray version inside the image (null when missing).
  returned: success
  type: str
  sample: 2.53.0
vllm_entrypoint:
  description: The image's C(vllm) command (null when its PATH has none).
  returned: success
  type: str
  sample: /opt/venv/bin/vllm
python:
  description: The interpreter the probe ran under (the one the C(vllm) command runs under).
  returned: success
  type: str
  sample: /opt/venv/bin/python3
interpreters:
  description: Each other interpreter our scripts run in the image (C(python3) on its PATH, the one the C(ray) command
    names), as the probe found it, with what it could not import (empty C(missing) when it imports everything).
  returned: success
  type: list
  elements: dict
  sample:
    - use: python3
      command: /usr/bin/python3
      interpreter: /usr/bin/python3
      python: 3.11.2
      missing: {"ray": "ModuleNotFoundError: No module named 'ray'"}
recipe:
  description: Each O(recipe) item's verdict, in order - its variable, its words, whether it is used and, when not, why.
  returned: success
  type: list
  elements: dict
  sample:
    - {variable: vllm_serve_kv_cache_dtype, args: [--kv-cache-dtype, fp8], used: true, why: ""}
    - variable: vllm_serve_fast_loader
      args: [--load-format, fastsafetensors]
      used: false
      why: "the image's vLLM (/opt/venv/bin/python3) cannot import fastsafetensors (ModuleNotFoundError: No module named
        'fastsafetensors')"
recipe_args:
  description: The words of the O(recipe) items used, to add after O(serve_args).
  returned: success
  type: list
  elements: str
  sample: [--enable-prefix-caching, --kv-cache-dtype, fp8]
packages:
  description: The packages the probe imported under the image's vLLM interpreter, each with its version or its error.
  returned: success
  type: dict
  sample: {fastsafetensors: {error: "ModuleNotFoundError: No module named 'fastsafetensors'"}}
model_architectures:
  description: The model's C(architectures) (empty when the config was not there).
  returned: success
  type: list
  elements: str
problems:
  description: What does not fit (empty on success).
  returned: always
  type: list
  elements: str
cached:
  description: Whether the probe's answer came from the cache.
  returned: success
  type: bool
probe_seconds:
  description: Seconds the probe container took (0 when cached).
  returned: success
  type: float
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner
from ansible_collections.sparkfleet.vllm.plugins.module_utils._settings import check_setting_names, render_text, setting_names_option
from ansible_collections.sparkfleet.vllm.plugins.module_utils import _json
from ansible_collections.sparkfleet.vllm.plugins.module_utils.image._image import (
    LAUNCHER, LOADER_ADVICE, PROBE, PROBE_FORMAT, ProbeError, image_id_key, judge, parse_probe, recipe_args,
    recipe_verdicts, recipe_warning, summary)


def _inspect(runner, docker, image):
    res = runner.run([docker, "image", "inspect", "--format", "{{.Id}}", image])
    if not res.ok:
        runner.fail(res, "image %s is not on this node" % image, image=image, problems=[],
                    hint="pull or load it first (the runtime_image play does that on the head)")
    return res.stdout.strip()


def _read_cache(path):
    try:
        return _json.load_file(path, limit=CONFIG_MAX_BYTES)
    except (OSError, ValueError):
        return None


def _write_cache(module, cache_dir, path, facts):
    try:
        if not os.path.isdir(cache_dir):
            os.makedirs(cache_dir, 0o755)
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(facts, handle, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except OSError as exc:
        module.warn("could not cache the image facts in %s: %s" % (cache_dir, exc))


def _model_architectures(module, path, required):
    if not path:
        return []
    if not os.path.exists(path):
        if required:
            module.fail_json(msg="model config %s does not exist" % path, problems=[],
                             hint="sync or download the model first (model_sync role)")
        module.warn("%s does not exist yet: the model's architectures are checked once it is there" % path)
        return []
    try:
        # bounded, and a FIFO or a device in the model directory is refused instead of blocking the step
        archs = _json.load_file(path, limit=CONFIG_MAX_BYTES).get("architectures") or []
        archs = archs if isinstance(archs, list) else [archs]
    except (OSError, ValueError, AttributeError) as exc:
        module.fail_json(msg="cannot read the architectures of %s: %s" % (path, exc), problems=[])
    return [str(a) for a in archs]


# A model's config.json is a few KiB; one of more is not a model's config.
CONFIG_MAX_BYTES = 16 * 1024 * 1024

IMAGE_FIX = ("Set {image} to an image whose vLLM knows the model and every flag passed (Qwen3.5 needs vLLM >= 0.17.1 "
             "with Ray >= 2.52, e.g. hellohal2064/vllm-qwen3.5-gb10 or nvcr.io/nvidia/vllm:26.03-py3 and newer), or "
             "drop the flags it does not know. Where python3 on the image's PATH is not the interpreter with Ray, use "
             "an image whose PATH finds its venv's python3 first. ")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            serve_args=dict(type="list", elements="str", default=[]),
            recipe=dict(type="list", elements="dict", default=[], options=dict(
                variable=dict(type="str", required=True),
                args=dict(type="list", elements="str", required=True),
                packages=dict(type="list", elements="str", default=[]),
                architectures=dict(type="list", elements="str", default=[]))),
            model_config=dict(type="path"),
            require_model=dict(type="bool", default=False),
            min_vllm_version=dict(type="str"),
            min_ray_version=dict(type="str"),
            cache_dir=dict(type="path", default="/var/lib/sparkfleet/image-checks"),
            timeout=dict(type="int", default=180),
            **setting_names_option()
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] < 1:
        module.fail_json(msg="timeout must be 1 or more seconds, got %d (0 would let the probe run forever)" % p["timeout"])
    check_setting_names(module)
    runner = Runner(module)
    docker = runner.bin("docker")
    image_id = _inspect(runner, docker, p["image"])
    key = image_id_key(image_id)
    cache = os.path.join(p["cache_dir"], key + ".json") if key else None

    facts = _read_cache(cache) if cache else None
    cached = facts is not None and facts.get("image_id") == image_id and facts.get("format") == PROBE_FORMAT
    seconds = 0.0
    if not cached:
        t0 = time.monotonic()
        res = runner.run([docker, "run", "--rm", "--pull=never", "--network", "none", "--entrypoint", "sh",
                          image_id, "-c", LAUNCHER, "sparkfleet-probe", PROBE], timeout=p["timeout"])
        seconds = round(time.monotonic() - t0, 1)
        try:
            facts = parse_probe(res.stdout)
        except ProbeError as exc:
            runner.fail(res, "image %s: %s" % (p["image"], exc), cmd=res.argv[:-3] + ["<launcher>", "<probe>"],
                        image=p["image"], image_id=image_id, problems=[str(exc)],
                        hint="use a vLLM image whose `vllm` command is on its PATH (vllm/vllm-openai, nvcr.io/nvidia/vllm)")
        facts["image_id"] = image_id
        if cache and not module.check_mode:
            _write_cache(module, p["cache_dir"], cache, facts)

    archs = _model_architectures(module, p["model_config"], p["require_model"])
    problems = judge(facts, serve_args=p["serve_args"], architectures=archs,
                     min_vllm_version=p["min_vllm_version"], min_ray_version=p["min_ray_version"])
    verdicts = recipe_verdicts(facts, p["recipe"], serve_args=p["serve_args"], architectures=archs)
    if not problems:
        for verdict in verdicts:
            if not verdict["used"]:
                module.warn(recipe_warning(p["image"], verdict))
    result = dict(changed=False, image=p["image"], image_id=image_id, vllm_version=facts.get("vllm"),
                  ray_version=facts.get("ray"), vllm_entrypoint=facts.get("vllm_entrypoint"),
                  python=facts.get("executable"), interpreters=facts.get("interpreters") or [],
                  model_architectures=archs, problems=problems, cached=cached, recipe=verdicts,
                  recipe_args=recipe_args(verdicts), packages=facts.get("packages") or {},
                  probe_seconds=seconds)
    if problems:
        module.fail_json(
            msg="image %s (%s) cannot serve this deployment: %s" % (p["image"], summary(facts), "; ".join(problems)),
            hint=render_text(IMAGE_FIX, p["setting_names"]) + LOADER_ADVICE,
            **result)
    module.exit_json(msg="image %s: %s" % (p["image"], summary(facts)), **result)


if __name__ == "__main__":
    main()
