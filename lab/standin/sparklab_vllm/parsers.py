"""Reasoning and tool-call parsing as vLLM's OpenAI server does it, for the stand-in's filler "model".

vLLM keeps two registries of parsers by name (vllm/reasoning: ReasoningParserManager; vllm/tool_parsers, before
0.13 vllm/entrypoints/openai/tool_parsers: ToolParserManager). `vllm serve --reasoning-parser NAME` and
`--enable-auto-tool-choice --tool-call-parser NAME` pick one each; the server refuses unknown names at start and
`tool_choice: "auto"` requests when auto tool choice is off. Qwen3.5 writes its reasoning as `<think>...</think>`
(the qwen3 reasoning parser) and its tool calls as Qwen3-Coder XML (the qwen3_coder tool parser):

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

The stand-in's model writes exactly that, so a deployment with the wrong parser (or none) gets what a real one gets:
the tags as plain text in `content`, no `tool_calls`.
"""

from __future__ import annotations

import json
import re
import uuid

from . import RELEASE


class _Manager:
    """The registry the image check reads (its names), as vLLM's managers expose them."""

    def __init__(self, names):
        self.lazy_parsers = {n: ("sparklab_vllm.parsers", "StandinParser") for n in names}
        self.tool_parsers = {}
        self.reasoning_parsers = {}

    def list_registered(self):
        return sorted(self.lazy_parsers)


ToolParserManager = _Manager(RELEASE["tool_parsers"])
ReasoningParserManager = _Manager(RELEASE["reasoning_parsers"])


class _NoParsers:
    enable_auto_tool_choice = None
    tool_call_parser = None
    reasoning_parser = None


def startup_error(args):
    """What vLLM raises before the engine starts for these `serve` arguments (None when they pass)."""
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        return "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"
    if args.enable_auto_tool_choice and args.tool_call_parser not in ToolParserManager.list_registered():
        return "KeyError: 'invalid tool call parser: %s (chose from { %s })'" % (
            args.tool_call_parser, ",".join(ToolParserManager.list_registered()))
    if args.reasoning_parser and args.reasoning_parser not in ReasoningParserManager.list_registered():
        return "KeyError: 'invalid reasoning parser: %s (chose from { %s })'" % (
            args.reasoning_parser, ",".join(ReasoningParserManager.list_registered()))
    return None


def request_error(req, args):
    """vLLM's 400 message for a chat request the server cannot honour (None when it can)."""
    args = args or _NoParsers
    tools = req.get("tools")
    choice = req.get("tool_choice", "auto" if tools else "none")
    if tools and choice == "auto" and not (args.enable_auto_tool_choice and args.tool_call_parser):
        return '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    if tools is not None and not isinstance(tools, list):
        return "tools: Input should be a valid list"
    return None


def model_output(req, filler):
    """What Qwen3.5 would write for this request: reasoning in <think> (unless the request turns thinking off), then
    either a tool call in Qwen3-Coder XML (when tools are offered and the choice is not "none") or the answer."""
    words = filler.split() or ["ok"]
    kwargs = req.get("chat_template_kwargs") or {}
    think = "" if kwargs.get("enable_thinking") is False else "<think>\n%s\n</think>\n\n" % " ".join(words[:8])
    tools = [t for t in req.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    if not tools or req.get("tool_choice", "auto") == "none":
        return think + " ".join(words)
    fn = tools[0]["function"]
    props = (fn.get("parameters") or {}).get("properties") or {}
    required = (fn.get("parameters") or {}).get("required") or list(props)[:1]
    params = "".join("<parameter=%s>\n%s\n</parameter>\n" % (name, words[i % len(words)])
                     for i, name in enumerate(required))
    return think + "<tool_call>\n<function=%s>\n%s</function>\n</tool_call>" % (fn.get("name", ""), params)


_THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>\s*", re.S)
_QWEN3_CODER_CALL = re.compile(r"<tool_call>\s*<function=([^>\s]+)>(.*?)</function>\s*</tool_call>", re.S)
_QWEN3_CODER_PARAM = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)
_HERMES_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


def _param_value(raw, schema):
    kind = (schema or {}).get("type")
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw)
        if kind == "boolean":
            return raw.strip().lower() == "true"
        if kind in ("object", "array"):
            return json.loads(raw)
    except ValueError:
        pass
    return raw


def parse(text, req, args):
    """The chat message fields vLLM returns for the model's text: (message fields, finish_reason)."""
    args = args or _NoParsers
    reasoning = None
    content = text
    if args.reasoning_parser in ("qwen3", "deepseek_r1"):
        m = _THINK.match(text)
        if m:
            reasoning, content = m.group(1).strip(), text[m.end():]
    calls = []
    tools = {t["function"].get("name"): t["function"] for t in req.get("tools") or []
             if isinstance(t, dict) and isinstance(t.get("function"), dict)}
    if req.get("tools") and args.enable_auto_tool_choice and req.get("tool_choice", "auto") == "auto":
        found = []
        if args.tool_call_parser in ("qwen3_coder", "qwen3_xml"):
            for name, body in _QWEN3_CODER_CALL.findall(content):
                props = ((tools.get(name) or {}).get("parameters") or {}).get("properties") or {}
                found.append((name, {k: _param_value(v, props.get(k)) for k, v in _QWEN3_CODER_PARAM.findall(body)}))
            first = content.find("<tool_call>")
        elif args.tool_call_parser == "hermes":
            for body in _HERMES_CALL.findall(content):
                try:
                    call = json.loads(body)
                    found.append((call["name"], call.get("arguments") or {}))
                except (ValueError, KeyError, TypeError):
                    continue
            first = content.find("<tool_call>")
        if found:
            calls = [{"id": "chatcmpl-tool-" + uuid.uuid4().hex, "type": "function",
                      "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
                     for name, arguments in found]
            content = content[:first].strip() or None
    message = {"content": content.strip() if isinstance(content, str) else content, "tool_calls": calls,
               RELEASE["reasoning_field"]: reasoning}
    return message, ("tool_calls" if calls else "length")
