#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_bench
short_description: Load-test the served API at several concurrencies (TTFT, inter-token latency, throughput)
version_added: 0.3.0
description:
  - Sends streamed completions to the served OpenAI-compatible API at each concurrency of O(concurrency) in turn
    (O(rounds) requests per simulated user, at least O(min_requests) per level) and reports, per level, the output
    tokens per second, time to first token (TTFT), inter-token latency (ITL), time per output token and end-to-end
    latency (mean, median, p99), and the failed requests.
  - "O(tool=vllm): the image's own C(vllm bench serve) (random dataset, O(input_tokens) in, O(output_tokens) out,
    C(--ignore-eos)) run inside the API server's container O(container); O(tool=client): the collection's own asyncio
    client (Python's standard library, on this node); O(tool=auto): C(vllm) when O(container) is given and its vLLM has
    C(bench serve), else C(client)."
  - "The API key goes in an C(Authorization) header (the client) or C(OPENAI_API_KEY) in the container's environment
    (C(vllm bench serve)); it never reaches a command line or the result."
  - "Bounded: each level stops sending after O(level_seconds) and each request after O(timeout); a level where no
    request succeeds ends the test. Changes nothing."
author:
  - sparkfleet.vllm contributors (@sparkfleet)
options:
  url:
    description: Base URL of the API (C(http://host:port)), without C(/v1).
    type: str
    required: true
  model:
    description: The served model name.
    type: str
    required: true
  api_key:
    description: The API key (C(vllm_serve_api_key)); empty for an open API.
    type: str
    default: ""
  concurrency:
    description: Concurrent users per level, in the order run.
    type: list
    elements: int
    default: [1, 4, 16, 64]
  rounds:
    description: Requests per user and level.
    type: int
    default: 2
  min_requests:
    description: Fewest requests a level sends.
    type: int
    default: 8
  input_tokens:
    description: Prompt length (the client's prompts are this many words, close to as many tokens).
    type: int
    default: 128
  output_tokens:
    description: Tokens generated per request (end of sequence ignored).
    type: int
    default: 64
  level_seconds:
    description: A level sends no new request after this many seconds.
    type: int
    default: 120
  timeout:
    description: Seconds one request may take.
    type: int
    default: 120
  tool:
    description: C(auto), C(vllm) (C(vllm bench serve) in O(container)) or C(client) (the collection's own).
    type: str
    default: auto
    choices: [auto, vllm, client]
  container:
    description: The running vLLM API server container (for O(tool=vllm)).
    type: str
  tokenizer:
    description: The model directory inside O(container) (C(vllm bench serve) builds its prompts with the tokenizer).
    type: str
notes:
  - Check mode is supported and behaves exactly like a normal run (a load test changes nothing).
extends_documentation_fragment:
  - sparkfleet.vllm.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Load-test the API at 1, 4, 16 and 64 users
  sparkfleet.vllm.serving_bench:
    url: http://10.1.230.180:30000
    model: Qwen/Qwen3.5-122B-A10B-FP8
    api_key: "{{ vllm_serve_api_key }}"
    container: sparkfleet-vllm
    tokenizer: /models/Qwen3.5-122B-A10B-FP8
"""

RETURN = r"""
tool:
  description: C(vllm bench serve) or C(client).
  returned: always
  type: str
levels:
  description:
    - One entry per concurrency run, each with C(concurrency), C(requests), C(ok), C(failed), C(duration_s),
      C(output_tokens), C(output_tok_s), C(request_s), and C(ttft_ms), C(itl_ms), C(tpot_ms), C(e2el_ms) as
      C(mean)/C(p50)/C(p99) dicts (null when not measurable, C(itl_note) saying why), C(errors).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkfleet.vllm.plugins.module_utils.engine import _load_test as lt
from ansible_collections.sparkfleet.vllm.plugins.module_utils._command import Runner


def _requests_for(p):
    return lambda c: max(c * p["rounds"], p["min_requests"])


def _vllm_bench(module, runner):
    p = module.params
    docker = runner.bin("docker")
    levels = []
    for concurrency in p["concurrency"]:
        n = _requests_for(p)(concurrency)
        argv = [docker, "exec", "-e", "OPENAI_API_KEY", p["container"], "timeout", "-k", "5", str(p["level_seconds"]),
                "vllm", "bench", "serve", "--backend", "vllm", "--base-url", p["url"], "--endpoint", "/v1/completions",
                "--model", p["model"], "--dataset-name", "random", "--random-input-len", str(p["input_tokens"]),
                "--random-output-len", str(p["output_tokens"]), "--num-prompts", str(n), "--max-concurrency",
                str(concurrency), "--request-rate", "inf", "--ignore-eos", "--percentile-metrics",
                "ttft,tpot,itl,e2el", "--disable-tqdm"]
        if p["tokenizer"]:
            argv += ["--tokenizer", p["tokenizer"]]
        res = runner.run(argv, env={"OPENAI_API_KEY": p["api_key"] or "EMPTY"}, timeout=p["level_seconds"] + 30,
                         kill_after=5, secrets=[p["api_key"]])
        if res.timed_out:
            levels.append({"concurrency": concurrency, "requests": n, "ok": 0, "failed": n, "errors": [
                "vllm bench serve did not finish within %d s (level_seconds)" % p["level_seconds"]]})
            break
        try:
            level = lt.parse_vllm_bench(res.stdout)
        except lt.LoadTestError as e:
            runner.fail(res, "vllm bench serve at concurrency %d failed: %s" % (concurrency, e))
        level["concurrency"] = concurrency
        levels.append(level)
        if not level["ok"]:
            break
    return "vllm bench serve", levels


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            model=dict(type="str", required=True),
            api_key=dict(type="str", default="", no_log=True),
            concurrency=dict(type="list", elements="int", default=[1, 4, 16, 64]),
            rounds=dict(type="int", default=2),
            min_requests=dict(type="int", default=8),
            input_tokens=dict(type="int", default=128, no_log=False),
            output_tokens=dict(type="int", default=64, no_log=False),
            level_seconds=dict(type="int", default=120),
            timeout=dict(type="int", default=120),
            tool=dict(type="str", default="auto", choices=["auto", "vllm", "client"]),
            container=dict(type="str"),
            tokenizer=dict(type="str", no_log=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    url = p["url"].rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    if not url.startswith(("http://", "https://")):
        module.fail_json(msg="url=%r is not an http(s) URL" % p["url"], hint="pass sparkfleet_api_url")
    p["url"] = url
    if not p["concurrency"] or any(c < 1 or c > 1024 for c in p["concurrency"]):
        module.fail_json(msg="concurrency=%r: each level must be 1-1024 users" % (p["concurrency"],))
    for name, low in (("rounds", 1), ("min_requests", 1), ("input_tokens", 1), ("output_tokens", 1),
                      ("level_seconds", 5), ("timeout", 5)):
        if p[name] < low:
            module.fail_json(msg="%s=%d is below %d" % (name, p[name], low))
    if p["tool"] == "vllm" and not p["container"]:
        module.fail_json(msg="tool=vllm runs vllm bench serve in the API server's container: container is not set",
                         hint="pass container (sparkfleet_vllm_unit), or tool: client")
    runner = Runner(module)
    tool = p["tool"]
    if tool == "auto":
        tool = "client"
        if p["container"]:
            res = runner.run([runner.bin("docker"), "exec", p["container"], "vllm", "bench", "serve", "--help"],
                             timeout=180, kill_after=5)
            if res.ok and "--max-concurrency" in (res.stdout or ""):
                tool = "vllm"
    if tool == "vllm":
        name, levels = _vllm_bench(module, runner)
    else:
        name = "client"
        try:
            levels = lt.run_levels(p["url"], p["api_key"], p["model"], p["concurrency"], _requests_for(p),
                                   p["input_tokens"], p["output_tokens"], p["timeout"], p["level_seconds"])
        except lt.LoadTestError as e:
            module.fail_json(msg="load test of %s failed: %s" % (p["url"], e))
    if not any(level.get("ok") for level in levels):
        first = next((e for level in levels for e in level.get("errors") or []), "no answer")
        module.fail_json(msg="no request to %s/v1/completions succeeded (%s): the API does not serve %s" % (
            p["url"], first, p["model"]), tool=name, levels=levels)
    module.exit_json(changed=False, tool=name, levels=levels)


if __name__ == "__main__":
    main()
