"""What Qwen3.5 clients call, on the served lab: the OpenAI chat API returns reasoning apart and a tool call parsed,
because the inventory serves with vLLM 0.17's Qwen3.5 parsers (--reasoning-parser qwen3, --enable-auto-tool-choice,
--tool-call-parser qwen3_coder), and the healthcheck proves it.

Run as root: lab/labctl ctl -- .venv/bin/pytest tests/integration/test_tool_calls.py -m lab
"""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.lab

HEAD = "spark-1"
MODEL = "sparklab/tiny-moe"   # inventories/lab: sparkfleet_model_id
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def runtime_tag():
    """The runtime image tag this lab instance uses (inventories/lab/group_vars/spark/runtime.yml reads the same)."""
    name = os.environ.get("SPARKLAB_NAME", "sfl")
    for path in ("/var/tmp/sparklab/share/runtime-image-%s.txt" % name, "/var/tmp/sparklab/share/runtime-image.txt"):
        if os.path.exists(path):
            with open(path) as handle:
                return handle.read().strip()
    pytest.fail("no runtime image tag file")


def test_the_served_api_returns_a_parsed_tool_call_and_the_reasoning(lab, serving):
    unit = lab.sh(HEAD, "cat /etc/systemd/system/sparkfleet-vllm.service").stdout
    assert "--reasoning-parser qwen3" in unit and "--tool-call-parser qwen3_coder" in unit
    assert "--enable-auto-tool-choice" in unit
    # every unit starts the image by its node's local image ID (nobody can retag it), not by the tag
    for host, name in [(HEAD, "sparkfleet-vllm")] + [(h, "sparkfleet-ray") for h in lab.hosts]:
        text = lab.sh(host, "cat /etc/systemd/system/%s.service" % name).stdout
        image_id = lab.sh(host, "docker image inspect --format '{{.Id}}' %s" % runtime_tag()).stdout.strip()
        assert image_id and " %s " % image_id in text and " sparklab/vllm-runtime:" not in text, (host, name)
    code, body = lab.api("/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris? Use the tool."}],
        "tools": WEATHER, "tool_choice": "auto", "max_tokens": 32})
    assert code == 200, body
    choice = body["choices"][0]
    calls = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "tool_calls" and len(calls) == 1 and choice["message"]["content"] is None
    assert calls[0]["type"] == "function" and calls[0]["function"]["name"] == "get_weather"
    assert set(json.loads(calls[0]["function"]["arguments"])) == {"city"}
    assert choice["message"]["reasoning"]      # Qwen3.5 thinks first; the reasoning parser returns it apart
    code, body = lab.api("/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
        "chat_template_kwargs": {"enable_thinking": False}})
    assert code == 200 and body["choices"][0]["message"]["tool_calls"] == []


@pytest.mark.long  # every site.yml on the lab runs it too (its healthcheck), the serving fixture's included
def test_the_healthcheck_proves_a_tool_call_comes_back_parsed(lab, serving, tmp_path):
    r, failures = lab.play(tmp_path, "playbooks/healthcheck.yml")
    assert r["status"] == "successful" and not failures, lab.messages(failures)
    said = [e["res"]["msg"] for e in r["events"] if str((e["res"] or {}).get("msg", "")).startswith("tool call: ")]
    assert len(said) == 1 and said[0].startswith('tool call: get_weather({"city": ')
    assert said[0].endswith("finish_reason tool_calls")
