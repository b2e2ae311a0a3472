"""`vllm` command line of the stand-in: vLLM's subcommands and `serve` argument names, argparse rejections."""

from __future__ import annotations

import argparse
import json
import sys

from . import RELEASE, STANDIN_MARKER, __version__

SUBCOMMANDS = ("chat", "complete", "serve", "bench", "collect-env", "run-batch")


def _bool_flag(group, name, help_text):
    # vLLM >= 0.10 spells booleans as --x / --no-x (argparse.BooleanOptionalAction)
    group.add_argument(name, action=argparse.BooleanOptionalAction, default=None, help=help_text)


def _json_or_str(value):
    try:
        return json.loads(value)
    except ValueError:
        return value


def human_readable_int(value):
    """vLLM's --max-model-len parser: 8192, 32k, 1M (k = 1000, K = 1024)."""
    s = str(value).strip()
    units = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}
    if s and s[-1] in units:
        return int(float(s[:-1]) * units[s[-1]])
    return int(s)


def add_serve_args(p):
    p.add_argument("model_tag", nargs="?", default=None, help="The model tag to serve (optional if specified in config)")
    p.add_argument("--model", default=None, help="Name or path of the Hugging Face model to use.")
    fe = p.add_argument_group("Frontend")
    fe.add_argument("--host", default=None, help="Host name.")
    fe.add_argument("--port", type=int, default=8000, help="Port number.")
    fe.add_argument("--uds", default=None)
    fe.add_argument("--uvicorn-log-level", default="info",
                    choices=["critical", "debug", "error", "info", "trace", "warning"])
    _bool_flag(fe, "--disable-uvicorn-access-log", "Disable uvicorn access log.")
    fe.add_argument("--api-key", nargs="+", default=None, help="If provided, the server will require one of these "
                    "keys to be presented in the header.")
    fe.add_argument("--allowed-origins", type=json.loads, default=["*"])
    fe.add_argument("--chat-template", default=None)
    fe.add_argument("--response-role", default="assistant")
    fe.add_argument("--root-path", default=None)
    fe.add_argument("--middleware", action="append", default=[])
    fe.add_argument("--ssl-keyfile", default=None)
    fe.add_argument("--ssl-certfile", default=None)
    _bool_flag(fe, "--enable-auto-tool-choice", "Enable auto tool choice.")
    fe.add_argument("--tool-call-parser", default=None)
    fe.add_argument("--reasoning-parser", default=None)
    _bool_flag(fe, "--enable-log-requests", "Log requests.")
    fe.add_argument("--disable-log-requests", action="store_true", default=False, help="[DEPRECATED] Disable logging "
                    "requests.")
    _bool_flag(fe, "--disable-log-stats", "Disable logging statistics.")
    fe.add_argument("--max-log-len", type=int, default=None)
    _bool_flag(fe, "--disable-fastapi-docs", "Disable FastAPI's OpenAPI schema, Swagger UI, and ReDoc endpoint.")
    _bool_flag(fe, "--enable-prompt-tokens-details", "Enable prompt_tokens_details in usage.")
    _bool_flag(fe, "--enable-server-load-tracking", "Enable tracking server_load_metrics.")
    _bool_flag(fe, "--enable-force-include-usage", "Include usage on every request.")
    fe.add_argument("--api-server-count", "-asc", type=int, default=1)
    mc = p.add_argument_group("ModelConfig")
    mc.add_argument("--tokenizer", default=None)
    mc.add_argument("--tokenizer-mode", default="auto", choices=["auto", "custom", "mistral", "slow"])
    _bool_flag(mc, "--trust-remote-code", "Trust remote code (e.g., from HuggingFace) when downloading the model.")
    mc.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float", "float16", "float32", "half"])
    mc.add_argument("--seed", type=int, default=None)
    mc.add_argument("--hf-config-path", default=None)
    mc.add_argument("--revision", default=None)
    mc.add_argument("--code-revision", default=None)
    mc.add_argument("--tokenizer-revision", default=None)
    mc.add_argument("--max-model-len", type=human_readable_int, default=None,
                    help="Model context length (e.g. 8192, 32k, 1M).")
    mc.add_argument("--quantization", "-q", default=None)
    _bool_flag(mc, "--enforce-eager", "Always use eager-mode PyTorch.")
    mc.add_argument("--max-logprobs", type=int, default=20)
    mc.add_argument("--served-model-name", nargs="+", default=None)
    mc.add_argument("--generation-config", default="auto")
    mc.add_argument("--override-generation-config", type=json.loads, default={})
    mc.add_argument("--hf-overrides", type=_json_or_str, default={})
    mc.add_argument("--logits-processors", nargs="+", default=None)
    mc.add_argument("--model-impl", default="auto", choices=["auto", "terratorch", "transformers", "vllm"])
    _bool_flag(mc, "--enable-sleep-mode", "Enable sleep mode.")
    mc.add_argument("--runner", default="auto", choices=["auto", "draft", "generate", "pooling"])
    mc.add_argument("--convert", default="auto")
    mc.add_argument("--task", default=None)
    mc.add_argument("--limit-mm-per-prompt", type=json.loads, default={})
    lc = p.add_argument_group("LoadConfig")
    lc.add_argument("--load-format", default="auto", help="The format of the model weights to load (auto, pt, "
                    "safetensors, npcache, dummy, tensorizer, runai_streamer, bitsandbytes, sharded_state, gguf, "
                    "mistral, fastsafetensors, instanttensor, ...).")
    lc.add_argument("--download-dir", default=None)
    if "--safetensors-load-strategy" not in RELEASE["serve_flags_absent"]:
        lc.add_argument("--safetensors-load-strategy", default="lazy",
                        choices=list(RELEASE["safetensors_load_strategies"]))
    lc.add_argument("--model-loader-extra-config", type=json.loads, default={})
    _bool_flag(lc, "--use-tqdm-on-load", "Whether to enable a progress bar for loading weights.")
    lc.add_argument("--ignore-patterns", nargs="+", default=None)
    _bool_flag(lc, "--pt-load-map-location", "Map location for pt checkpoints.")
    pc = p.add_argument_group("ParallelConfig")
    pc.add_argument("--distributed-executor-backend", default=None, choices=["external_launcher", "mp", "ray", "uni"])
    pc.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    pc.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    pc.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    pc.add_argument("--data-parallel-rank", "-dpn", type=int, default=None)
    pc.add_argument("--data-parallel-size-local", "-dpl", type=int, default=None)
    pc.add_argument("--data-parallel-address", "-dpa", default=None)
    pc.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=None)
    pc.add_argument("--data-parallel-backend", "-dpb", default="mp", choices=["mp", "ray"])
    _bool_flag(pc, "--enable-expert-parallel", "Use expert parallelism instead of tensor parallelism for MoE layers.")
    pc.add_argument("--max-parallel-loading-workers", type=int, default=None)
    _bool_flag(pc, "--ray-workers-use-nsight", "Profile Ray workers with nsight.")
    _bool_flag(pc, "--disable-custom-all-reduce", "Disable the custom all-reduce kernel.")
    pc.add_argument("--nnodes", "-n", type=int, default=1)
    pc.add_argument("--node-rank", "-r", type=int, default=0)
    pc.add_argument("--master-addr", default="127.0.0.1")
    pc.add_argument("--master-port", type=int, default=29501)
    cc = p.add_argument_group("CacheConfig")
    cc.add_argument("--block-size", type=int, default=None, choices=[1, 8, 16, 32, 64, 128, 256])
    cc.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    cc.add_argument("--kv-cache-memory-bytes", default=None)
    cc.add_argument("--swap-space", type=float, default=4)
    cc.add_argument("--kv-cache-dtype", default="auto",
                    choices=["auto", "bfloat16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc"])
    cc.add_argument("--num-gpu-blocks-override", type=int, default=None)
    _bool_flag(cc, "--enable-prefix-caching", "Whether to enable prefix caching.")
    cc.add_argument("--prefix-caching-hash-algo", default="sha256", choices=["sha256", "sha256_cbor"])
    cc.add_argument("--cpu-offload-gb", type=float, default=0)
    cc.add_argument("--calculate-kv-scales", action=argparse.BooleanOptionalAction, default=None)
    cc.add_argument("--mamba-ssm-cache-dtype", default="auto")
    sc = p.add_argument_group("SchedulerConfig")
    sc.add_argument("--max-num-batched-tokens", type=int, default=None)
    sc.add_argument("--max-num-seqs", type=int, default=None)
    sc.add_argument("--max-num-partial-prefills", type=int, default=1)
    sc.add_argument("--max-long-partial-prefills", type=int, default=1)
    sc.add_argument("--long-prefill-token-threshold", type=int, default=0)
    _bool_flag(sc, "--enable-chunked-prefill", "Enable chunked prefill.")
    sc.add_argument("--scheduling-policy", default="fcfs", choices=["fcfs", "priority"])
    _bool_flag(sc, "--async-scheduling", "Enable asynchronous scheduling.")
    cmp = p.add_argument_group("CompilationConfig")
    cmp.add_argument("--compilation-config", "-O", type=_json_or_str, default=None)
    cmp.add_argument("--cuda-graph-sizes", nargs="+", type=int, default=None)
    sp = p.add_argument_group("SpeculativeConfig")
    sp.add_argument("--speculative-config", type=json.loads, default=None)
    ob = p.add_argument_group("ObservabilityConfig")
    ob.add_argument("--otlp-traces-endpoint", default=None)
    ob.add_argument("--collect-detailed-traces", default=None)
    vc = p.add_argument_group("VllmConfig")
    vc.add_argument("--kv-transfer-config", type=json.loads, default=None)
    vc.add_argument("--additional-config", type=json.loads, default={})
    p.add_argument("--config", default=None, help="Read CLI options from a config file (YAML).")
    p.add_argument("--headless", action="store_true", default=False)
    p.add_argument("--disable-frontend-multiprocessing", action="store_true", default=False)
    return p


def build_parser():
    parser = argparse.ArgumentParser(
        prog="vllm", description="vLLM CLI [%s for vLLM %s: lab only, no GPU, no real inference]"
        % (STANDIN_MARKER, __version__))
    parser.add_argument("-v", "--version", action="version", version=__version__)
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    for name in SUBCOMMANDS:
        if name == "serve":
            sp = subparsers.add_parser(
                "serve", help="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
                description="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP. "
                "[%s: Ray placement, gloo rendezvous and shard reads are real; generation is filler]"
                % STANDIN_MARKER, usage="vllm serve [model_tag] [options]")
            add_serve_args(sp)
        else:
            subparsers.add_parser(name, help="(not provided by the %s)" % STANDIN_MARKER)
    return parser


def parse(argv):
    """Parse like vLLM: unknown options end in 'vllm: error: unrecognized arguments: ...' and exit 2."""
    args = build_parser().parse_args(argv)
    if args.subparser == "serve":
        if args.model_tag and args.model and args.model_tag != args.model:
            pass  # vLLM takes the positional tag and warns; we do the same in serve
        args.model = args.model_tag or args.model or "Qwen/Qwen3-0.6B"
        if args.served_model_name is None:
            args.served_model_name = [args.model]
    return args


def non_default_args(args):
    """What vLLM logs as 'non-default args: {...}'."""
    defaults = vars(build_parser().parse_args(["serve"]))
    out = {}
    for k, v in vars(args).items():
        if k in ("subparser", "model_tag"):
            continue
        if k == "served_model_name" and v == [args.model]:
            continue
        if k == "model" and v != "Qwen/Qwen3-0.6B":
            out[k] = v
            continue
        if defaults.get(k) != v and k != "model":
            out[k] = v
    if out.get("api_key"):
        out["api_key"] = ["<redacted>"]  # the stand-in never echoes a key
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.subparser != "serve":
        if args.subparser is None:
            build_parser().print_help()
            return 0
        sys.stderr.write("%s: `vllm %s` is not implemented by the stand-in; only `vllm serve`.\n"
                         % (STANDIN_MARKER, args.subparser))
        return 2
    from .api_server import run_server
    return run_server(args)
