"""Write a fake Hugging Face model directory that the vLLM stand-in (and our sync/verify code) can load.

    python3 make_model.py --out DIR --shards N --shard-mb M [--name NAME] [--seed S]

Files: config.json, generation_config.json, tokenizer_config.json, tokenizer.json, model.safetensors.index.json
(metadata.total_size, weight_map) and N model-0000i-of-0000N.safetensors shards with valid headers and random
bytes. The same arguments always give byte-identical files. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import struct
import sys

ROW = 1024            # elements per row of every tensor
DTYPE = "BF16"
ELEM = 2              # bytes per BF16 element
TENSORS_PER_SHARD = 8
CHUNK = 4 << 20


def shard_name(i, n):
    return "model-%05d-of-%05d.safetensors" % (i, n)


def plan(shards, shard_mb):
    """[(file, [(tensor name, rows)])]: ~shard_mb MiB of BF16 tensors per shard, named like a decoder stack."""
    rows_total = max(int(shard_mb * (1 << 20)) // (ROW * ELEM), TENSORS_PER_SHARD)
    per = rows_total // TENSORS_PER_SHARD
    sizes = [per] * TENSORS_PER_SHARD
    sizes[-1] += rows_total - per * TENSORS_PER_SHARD
    kinds = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "post_attention_layernorm")
    out = []
    for s in range(shards):
        names = []
        for t in range(TENSORS_PER_SHARD):
            if s == 0 and t == 0:
                name = "model.embed_tokens.weight"
            elif s == shards - 1 and t == TENSORS_PER_SHARD - 1:
                name = "lm_head.weight"
            else:
                name = "model.layers.%d.%s.weight" % (s, kinds[t])
            names.append((name, sizes[t]))
        out.append((shard_name(s + 1, shards), names))
    return out


def header_bytes(tensors):
    """safetensors header: 8-byte little-endian length, then JSON padded with spaces to 8-byte alignment."""
    meta = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, rows in sorted(tensors):
        size = rows * ROW * ELEM
        meta[name] = {"dtype": DTYPE, "shape": [rows, ROW], "data_offsets": [off, off + size]}
        off += size
    raw = json.dumps(meta, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw, off


def write_shard(path, tensors, seed):
    head, data_len = header_bytes(tensors)
    rng = random.Random(seed)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(head)
        left = data_len
        while left:
            n = min(CHUNK, left)
            f.write(rng.getrandbits(n * 8).to_bytes(n, "little"))
            left -= n
    os.replace(tmp, path)
    return data_len


def tokenizer_json():
    vocab = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    for i in range(256):
        vocab.setdefault("<0x%02X>" % i, len(vocab))
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}
                         for t, i in (("<|endoftext|>", 0), ("<|im_start|>", 1), ("<|im_end|>", 2))],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": True, "vocab": vocab, "merges": []},
    }


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def make_model(out, shards, shard_mb, name="sparklab/Qwen3-Tiny-Standin", seed=0):
    os.makedirs(out, exist_ok=True)
    layout = plan(shards, shard_mb)
    vocab = 259
    write_json(os.path.join(out, "config.json"), {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe", "_name_or_path": name,
        "hidden_size": ROW, "intermediate_size": 3 * ROW, "num_hidden_layers": shards,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128, "hidden_act": "silu",
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.57.1", "use_cache": True, "vocab_size": vocab,
        "bos_token_id": 0, "eos_token_id": 2, "attention_bias": False, "attention_dropout": 0.0,
        "sliding_window": None, "use_sliding_window": False, "max_window_layers": shards})
    write_json(os.path.join(out, "generation_config.json"), {
        "bos_token_id": 0, "eos_token_id": [2, 0], "do_sample": True, "temperature": 0.7, "top_k": 20,
        "top_p": 0.8, "transformers_version": "4.57.1"})
    write_json(os.path.join(out, "tokenizer_config.json"), {
        "tokenizer_class": "Qwen2Tokenizer", "model_max_length": 32768, "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None, "clean_up_tokenization_spaces": False,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"})
    write_json(os.path.join(out, "tokenizer.json"), tokenizer_json())
    weight_map = {}
    total = 0
    for i, (fname, tensors) in enumerate(layout):
        # per-shard seed: independent of the shard count's effect on earlier shards' bytes
        s = int.from_bytes(hashlib.sha256(("%d|%s" % (seed, fname)).encode()).digest()[:8], "big")
        total += write_shard(os.path.join(out, fname), tensors, s)
        for tname, _rows in tensors:
            weight_map[tname] = fname
    write_json(os.path.join(out, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    return total


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--out", required=True, help="model directory to write (created if missing)")
    p.add_argument("--shards", type=int, required=True, help="number of safetensors shards")
    p.add_argument("--shard-mb", type=float, required=True, help="MiB of tensor data per shard")
    p.add_argument("--name", default="sparklab/Qwen3-Tiny-Standin", help="_name_or_path written to config.json")
    p.add_argument("--seed", type=int, default=0, help="seed for the random tensor bytes")
    a = p.parse_args(argv)
    if a.shards < 1 or a.shard_mb <= 0:
        p.error("--shards must be >= 1 and --shard-mb > 0")
    total = make_model(a.out, a.shards, a.shard_mb, a.name, a.seed)
    sys.stdout.write("wrote %s: %d shards, %d bytes of tensors\n" % (a.out, a.shards, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
