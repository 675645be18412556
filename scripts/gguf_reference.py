#!/usr/bin/env python3
"""Makes the GGUF references that policy/gguf's Go tests compare with.

Run from the repository root with the pinned venv (scripts/setup_pyref.sh):

    .deps/pyref/bin/python scripts/gguf_reference.py              # write references
    .deps/pyref/bin/python scripts/gguf_reference.py smollm2 FILE # the real model's
    .deps/pyref/bin/python scripts/gguf_reference.py check DIR    # read Go's output
    .deps/pyref/bin/python scripts/gguf_reference.py check-policy DIR
    .deps/pyref/bin/python scripts/gguf_reference.py generate FILE...
    .deps/pyref/bin/python scripts/gguf_reference.py quants [TYPE...]
    .deps/pyref/bin/python scripts/gguf_reference.py model NAME...  # one tiny model
    .deps/pyref/bin/python scripts/gguf_reference.py mixes SOURCE FILE...

The first form (re)writes, deterministically (fixed seeds, one CPU thread),
policy/gguf/testdata/:

  quant-TYPE.gguf     one file per tensor type mlerl reads (F32, F16, BF16,
      Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 quantized by the gguf package from normal
      draws; Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS as random blocks
      with sane f16 scales, since gguf-py has no quantizer for them), each
      with one 3 x 256 tensor "t";
  quants.json         gguf.quants.dequantize's values of each: the sha256 of
      the float32 little-endian bytes and the first values;
  NAME.gguf           tiny random models as llama.cpp's converter lays them
      out (names blk.N.*, Q and K of llama permuted for its RoPE, the
      tokenizer in tokenizer.ggml.*, the chat template), written with
      gguf.GGUFWriter: llama (SmolLM2's layout: pre-tokenizer smollm,
      ChatML, tied, a tensor type per projection), llama5 (llama with the
      types llama.cpp's k-quant mixes fall back to: Q5_0, IQ4_NL, Q5_1),
      llamak (llama 256 wide in the K-quants, IQ4_XS and Q5_1),
      llama3 (pre llama-bpe,
      Llama 3.1's template, untied, Q8_0), qwen2 (q/k/v biases) and qwen3
      (q/k norms, head_dim 128 apart from hidden/heads, Qwen3's template), each with a byte-level BPE trained
      here by `tokenizers` on policy/hf's corpus;
  NAME.json + NAME.safetensors   what transformers makes of each file
      (from_pretrained(dir, gguf_file=...)): the logits of a fixed sequence
      (float32), a greedy continuation, and the ids the original
      tokenizer (the one trained here) gives for test strings.

Before writing, every tiny model is checked: transformers' logits from the
GGUF equal those of the original model with the same (dequantized)
weights, which proves the file's Q/K permutation is llama.cpp's.

The second form writes policy/gguf/testdata/smollm2.json from the real
SmolLM2-135M-Instruct Q4_1 file (issue 58): its sha256, gguf's
dequantization of a sample of tensors, transformers' logits for a chat
prompt (top ids per position, log-sum-exp) and its greedy continuation.

The third form reads what Go's TestWriteGGUFForPython wrote into DIR
(MLERL_GGUF_ROUNDTRIP_DIR=DIR): each .gguf with gguf's GGUFReader, checks
the tensors against Go's dequantized values, and transformers' logits on
it against Go's logits, and prints one line per file.

The fourth form reads what policy's TestGGUFCheckpointRoundTrip wrote into
DIR (MLERL_POLICY_GGUF_ROUNDTRIP_DIR=DIR) after training the tiny llama
GGUF: the checkpoint's PEFT adapter loaded by PEFT on the GGUF base, the
merged Hugging Face folder and the merged GGUF files loaded by
transformers, each against the engine's logits.

The fifth form prints gguf's reading and transformers' greedy answer to one
question for each file (e.g. `mlerl export gguf`'s output).

The sixth form writes only the quant-TYPE.gguf files (of the named types,
or all) and quants.json, without the models.

The seventh form writes policy/gguf/testdata/mixes.json from llama.cpp's
quantizations of SOURCE (scripts/gguf_mixes.sh runs it): each FILE's
sha256, its tensor types, and transformers' greedy answer, which
policy's TestLlamaCppMixes compares the native engine's with.
"""
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter
from safetensors.numpy import save_file as np_save_file, load_file as np_load_file
from tokenizers import AddedToken, Tokenizer, models, trainers, pre_tokenizers
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "policy" / "gguf" / "testdata"
HF = ROOT / "policy" / "hf" / "testdata"
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()

CONTROL, USER_DEFINED, NORMAL, UNUSED = 3, 4, 1, 5


def f32_sha(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()


# ------------------------------------------------------------ tensor types
# Where each randomly drawn type keeps its f16 scales: byte offsets within
# a block (d first, then dmin).
RANDOM_BLOCK_SCALES = {"Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "Q2_K": [80, 82], "Q3_K": [108],
                       "IQ4_NL": [0], "IQ4_XS": [0]}


def quant_files(only=None):
    """Writes quant-TYPE.gguf for each type (those in only, when given) and
    quants.json. The draws of a type never depend on a later one's, so a
    type added at the end leaves every earlier file as it was."""
    rng = np.random.default_rng(58)
    ref = json.loads((OUT / "quants.json").read_text()) if only else {}
    for qt in [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q5_K, Q.Q6_K,
               Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.IQ4_NL, Q.IQ4_XS]:
        rows, cols = 3, 256
        x = (rng.standard_normal((rows, cols)) * 0.7).astype(np.float32)
        x[0, :8] = [0, -0.0, 1e-8, -3.5, 65504, 2.5e-5, -1e-3, 0.1]  # edges for the float types
        if qt.name in RANDOM_BLOCK_SCALES:
            # gguf-py has no quantizer for these: random blocks whose f16
            # scales are set to values a quantizer would write (random
            # bytes could be NaN).
            bsize = gguf.GGML_QUANT_SIZES[qt][1]
            nb = cols // gguf.GGML_QUANT_SIZES[qt][0]
            raw = rng.integers(0, 256, size=(rows, nb * bsize), dtype=np.uint8)
            for r in range(rows):
                for b in range(nb):
                    for off in RANDOM_BLOCK_SCALES[qt.name]:
                        o = b * bsize + off
                        raw[r, o:o + 2] = np.array([rng.uniform(1e-3, 5e-2)], dtype=np.float16).view(np.uint8)
            data = raw
        else:
            data = gguf.quants.quantize(x, qt)
        if only and qt.name not in only:
            continue
        deq = gguf.quants.dequantize(data, qt).astype(np.float32).reshape(rows, cols)
        path = OUT / f"quant-{qt.name}.gguf"
        w = GGUFWriter(str(path), "none")
        w.add_string("general.name", f"mlerl {qt.name} reference")
        if qt in (Q.F32, Q.F16):
            w.add_tensor("t", data)
        else:
            w.add_tensor("t", data, raw_dtype=qt)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        ref[qt.name] = {"shape": [rows, cols], "sha256": f32_sha(deq), "first": [float(v) for v in deq.reshape(-1)[:16]],
                        "last": [float(v) for v in deq.reshape(-1)[-8:]]}
    (OUT / "quants.json").write_text(json.dumps(ref, indent=1) + "\n")


# -------------------------------------------------------------- tokenizers
def corpus():
    texts = []
    for line in (HF / "tokenize" / "corpus.jsonl").read_text().split("\n"):
        if not line:
            continue
        texts.append(json.loads(line)["text"])
    return texts


# The pre-tokenizer of each llama.cpp `tokenizer.ggml.pre`, as the original
# models' tokenizer.json files write it (policy/hf's tiny tokenizers carry
# the real ones: SmolLM2's Digits + ByteLevel, Llama 3's and Qwen2's Split).
BASES = {"smollm": "gpt2", "llama-bpe": "llama3", "qwen2": "qwen"}


def train_tokenizer(pre, specials, added, vocab):
    base = Tokenizer.from_file(str(HF / "tok" / BASES[pre] / "tokenizer.json"))
    tok = Tokenizer(models.BPE())
    tok.normalizer = base.normalizer
    tok.pre_tokenizer = base.pre_tokenizer
    tok.decoder = base.decoder
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[AddedToken(s, special=True, normalized=False) for s in specials],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    if added:
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in added])
    if pre == "llama-bpe":  # Llama 3's model.ignore_merges
        j = json.loads(tok.to_str())
        j["model"]["ignore_merges"] = True
        tok = Tokenizer.from_str(json.dumps(j))
    return tok


TEST_STRINGS = [
    "Hello world! The model's accuracy is 0.8734 after 12 epochs.",
    "  leading spaces\n\n\ttabs and newlines\r\n",
    "import numpy as np\nfor i in range(10):\n    print(i ** 2)",
    "héllo wörld ünïcode 日本語 😀 \u00a0nbsp",
    "<|im_start|>user\nhi<|im_end|>",
    "1234567890 3.14159 1e-5",
]


def token_table(tok, vocab_size):
    """llama.cpp's tokens, token types and merges of a byte-level BPE."""
    v = tok.get_vocab(with_added_tokens=True)
    inv = {i: s for s, i in v.items()}
    added = {a.content: a for a in tok.get_added_tokens_decoder().values()}
    tokens, types = [], []
    for i in range(vocab_size):
        s = inv.get(i)
        if s is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
        elif s in added:
            tokens.append(s)
            types.append(CONTROL if added[s].special else USER_DEFINED)
        else:
            tokens.append(s)
            types.append(NORMAL)
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in merges]
    return tokens, types, merges


# ------------------------------------------------------------------ models
def template(name):
    d = HF / "ckpt" / name
    if (d / "chat_template.jinja").exists():
        return (d / "chat_template.jinja").read_text()
    return json.loads((d / "tokenizer_config.json").read_text())["chat_template"]


MODELS = {
    # SmolLM2's layout: ChatML, tied, every projection in another type.
    "llama": dict(arch="llama", pre="smollm", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], added=[],
                  vocab=352, tok_vocab=330, hidden=64, heads=4, kv=2, layers=2, ffn=64, tied=True,
                  bos="<|im_start|>", eos="<|im_end|>", pad="<|im_end|>", template="llama", rope_theta=100000.0, eps=1e-5,
                  types={"token_embd": Q.Q8_0, "attn_q": Q.Q4_0, "attn_k": Q.Q4_1, "attn_v": Q.Q8_0, "attn_output": Q.F16,
                         "ffn_gate": Q.BF16, "ffn_up": Q.Q4_1, "ffn_down": Q.Q4_0}),
    # As llama, with the types llama.cpp's k-quant mixes fall back to:
    # Q5_0 and IQ4_NL (kept as Q8_0 blocks, Q and K's rows permuted), Q5_1.
    "llama5": dict(arch="llama", pre="smollm", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], added=[],
                   vocab=352, tok_vocab=330, hidden=64, heads=4, kv=2, layers=2, ffn=64, tied=True,
                   bos="<|im_start|>", eos="<|im_end|>", pad="<|im_end|>", template="llama", rope_theta=100000.0, eps=1e-5,
                   types={"token_embd": Q.Q8_0, "attn_q": Q.Q5_0, "attn_k": Q.IQ4_NL, "attn_v": Q.Q5_1, "attn_output": Q.Q5_0,
                          "ffn_gate": Q.IQ4_NL, "ffn_up": Q.Q5_1, "ffn_down": Q.Q5_0}),
    # As llama, 256 wide, with the K-quants and IQ4_XS (256-value blocks,
    # which gguf-py cannot quantize: random_blocks) and Q5_1, which the
    # native engine keeps as the file stores them.
    "llamak": dict(arch="llama", pre="smollm", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], added=[],
                   vocab=352, tok_vocab=330, hidden=256, heads=4, kv=2, layers=1, ffn=256, tied=True,
                   bos="<|im_start|>", eos="<|im_end|>", pad="<|im_end|>", template="llama", rope_theta=100000.0, eps=1e-5,
                   types={"token_embd": Q.Q6_K, "attn_q": Q.Q4_K, "attn_k": Q.Q5_K, "attn_v": Q.Q3_K, "attn_output": Q.Q2_K,
                          "ffn_gate": Q.IQ4_XS, "ffn_up": Q.Q5_1, "ffn_down": Q.Q4_K}),
    "llama3": dict(arch="llama", pre="llama-bpe",
                   specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], added=[],
                   vocab=320, tok_vocab=320, hidden=64, heads=4, kv=1, layers=1, ffn=64, tied=False,
                   bos="<|begin_of_text|>", eos="<|eot_id|>", pad=None, template="llama3", rope_theta=500000.0, eps=1e-5,
                   types={"*": Q.Q8_0}),
    "qwen2": dict(arch="qwen2", pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], added=[],
                  vocab=320, tok_vocab=320, hidden=64, heads=4, kv=2, layers=1, ffn=64, tied=True,
                  bos=None, eos="<|im_end|>", pad="<|endoftext|>", template="qwen2", rope_theta=1000000.0, eps=1e-6,
                  types={"*": Q.Q8_0}),
    "qwen3": dict(arch="qwen3", pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], added=["<think>", "</think>"],
                  vocab=320, tok_vocab=318, hidden=64, heads=2, kv=1, head_dim=128, layers=1, ffn=64, tied=True,
                  bos=None, eos="<|im_end|>", pad="<|endoftext|>", template="qwen3", rope_theta=1000000.0, eps=1e-6,
                  types={"*": Q.Q8_0}),
}


def hf_model(spec, tok):
    torch.manual_seed(58)
    ids = lambda s: None if s is None else tok.token_to_id(s)
    common = dict(vocab_size=spec["vocab"], hidden_size=spec["hidden"], intermediate_size=spec["ffn"],
                  num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"], num_key_value_heads=spec["kv"],
                  max_position_embeddings=4096, rms_norm_eps=spec["eps"], rope_theta=spec["rope_theta"],
                  tie_word_embeddings=spec["tied"], bos_token_id=ids(spec["bos"]), eos_token_id=ids(spec["eos"]),
                  initializer_range=0.15)
    if "head_dim" in spec:  # Qwen3's own head width (transformers' GGUF loader keeps Qwen3Config's 128)
        common["head_dim"] = spec["head_dim"]
    cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}
    cfg_cls, model_cls = cls[spec["arch"]]
    model = model_cls(cfg_cls(**common)).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif n.endswith(".bias"):
                p.copy_(0.2 * torch.randn_like(p))
    return model


def permute(w, n_head, n_head_kv):
    """llama.cpp's converter's reordering of a llama Q or K projection: within
    each head, the rows of the two halves that RoPE pairs (i, i + d/2) are
    interleaved, so that the pairs are adjacent."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = [
    ("model.embed_tokens.weight", "token_embd.weight"), ("model.norm.weight", "output_norm.weight"), ("lm_head.weight", "output.weight"),
]
LAYER_NAMES = [
    ("input_layernorm.weight", "attn_norm.weight"), ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"), ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"), ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_proj.bias", "attn_q.bias"), ("self_attn.k_proj.bias", "attn_k.bias"), ("self_attn.v_proj.bias", "attn_v.bias"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"), ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"), ("mlp.up_proj.weight", "ffn_up.weight"), ("mlp.down_proj.weight", "ffn_down.weight"),
]


def gguf_name(hf):
    for a, b in GGUF_NAMES:
        if hf == a:
            return b
    parts = hf.split(".")
    rest = ".".join(parts[3:])
    for a, b in LAYER_NAMES:
        if rest == a:
            return f"blk.{parts[2]}.{b}"
    raise KeyError(hf)


def write_model(name, spec):
    tok = train_tokenizer(spec["pre"], spec["specials"], spec["added"], spec["tok_vocab"])
    model = hf_model(spec, tok)
    tokens, types, merges = token_table(tok, spec["vocab"])
    path = OUT / f"{name}.gguf"
    arch = spec["arch"]
    w = GGUFWriter(str(path), arch)
    w.add_string("general.name", f"mlerl tiny {name}")
    w.add_context_length(4096)
    w.add_embedding_length(spec["hidden"])
    w.add_block_count(spec["layers"])
    w.add_feed_forward_length(spec["ffn"])
    w.add_head_count(spec["heads"])
    w.add_head_count_kv(spec["kv"])
    w.add_layer_norm_rms_eps(spec["eps"])
    w.add_rope_freq_base(spec["rope_theta"])
    w.add_vocab_size(spec["vocab"])
    head_dim = spec.get("head_dim", spec["hidden"] // spec["heads"])
    if arch == "llama":
        w.add_rope_dimension_count(head_dim)
    if arch == "qwen3":
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(spec["pre"])
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for key, tokname in (("bos", spec["bos"]), ("eos", spec["eos"]), ("pad", spec["pad"])):
        if tokname is not None:
            getattr(w, f"add_{key}_token_id")(tok.token_to_id(tokname))
    w.add_add_bos_token(False)
    w.add_chat_template(template(spec["template"]))
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    if spec["tied"]:
        sd.pop("lm_head.weight", None)
    deq = {}
    for hf_name, t in sd.items():
        g = gguf_name(hf_name)
        x = t
        if arch == "llama" and g.endswith("attn_q.weight"):
            x = permute(x, spec["heads"], spec["heads"])
        elif arch == "llama" and g.endswith("attn_k.weight"):
            x = permute(x, spec["heads"], spec["kv"])
        short = g.split(".")[-2] if g.startswith("blk.") else g.split(".")[0]
        qt = Q.F32 if t.ndim == 1 else spec["types"].get(short, spec["types"].get("*", Q.F32))
        data = quantize(x, qt)
        if qt in (Q.F32, Q.F16):
            w.add_tensor(g, data)
        else:
            w.add_tensor(g, data, raw_dtype=qt)
        back = gguf.quants.dequantize(data, qt).astype(np.float32).reshape(x.shape)
        # What the GGUF holds, in the original (unpermuted) order.
        if arch == "llama" and g.endswith("attn_q.weight"):
            back = unpermute(back, spec["heads"], spec["heads"])
        elif arch == "llama" and g.endswith("attn_k.weight"):
            back = unpermute(back, spec["heads"], spec["kv"])
        deq[hf_name] = back
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # The original model with the file's (dequantized) weights.
    with torch.no_grad():
        sdict = model.state_dict()
        for k, v in deq.items():
            sdict[k].copy_(torch.from_numpy(v))
        if spec["tied"]:
            model.lm_head.weight = model.model.embed_tokens.weight

    seq = tok.encode("<|im_start|>user\nWhat is 2+2? Answer briefly.<|im_end|>\n").ids[:12]
    if len(seq) < 6:
        raise SystemExit(f"{name}: sequence too short")
    ids = torch.tensor([seq])
    with torch.no_grad():
        want = model(ids).logits[0].float().numpy()
    gm = AutoModelForCausalLM.from_pretrained(str(OUT), gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        got = gm(ids).logits[0].float().numpy()
        gen = gm.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(seq):].tolist()
    diff = float(np.abs(got - want).max())
    if diff > 1e-4:
        raise SystemExit(f"{name}: transformers' logits from the GGUF differ from the original model's by {diff}: the file's layout is wrong")
    hf_tok = AutoTokenizer.from_pretrained(str(OUT), gguf_file=path.name)
    np_save_file({"logits": np.ascontiguousarray(got, dtype=np.float32)}, str(OUT / f"{name}.safetensors"))
    ref = {
        "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "ids": seq,
        "greedy": gen,
        "max_abs_diff_vs_original": diff,
        "tokenize": [{"text": s, "ids": tok.encode(s).ids, "transformers_gguf_ids": hf_tok.encode(s, add_special_tokens=False)} for s in TEST_STRINGS],
        "transformers": transformers.__version__,
        "gguf": gguf_version(),
    }
    (OUT / f"{name}.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"{name}: {path.stat().st_size} bytes, transformers vs original max |diff| {diff:.2e}")


def random_blocks(x, qt):
    """Blocks of qt for a tensor shaped as x, which gguf-py cannot quantize
    into (the K-quants, IQ4_XS): random bytes (drawn from the shape and
    the type, so a rerun writes the same) whose f16 scales are all set to
    one value c, chosen so that the values' spread is x's (every value is
    linear in the scales together)."""
    rows, cols = x.shape
    bvals, bsize = gguf.GGML_QUANT_SIZES[qt]
    rng = np.random.default_rng([rows, cols, int(qt)])
    raw = rng.integers(0, 256, size=(rows, cols // bvals, bsize), dtype=np.uint8)
    center_mins(raw, qt, rng)

    def scaled(c):
        out = raw.copy()
        for off in RANDOM_BLOCK_SCALES[qt.name]:
            out[:, :, off:off + 2] = np.array([c], dtype=np.float16).view(np.uint8)
        return out.reshape(rows, -1)
    unit = gguf.quants.dequantize(scaled(1.0), qt).astype(np.float32)
    return scaled(float(x.std() / unit.std()))


def center_mins(raw, qt, rng):
    """For the types with a min per sub-block (x = d*sc*q - dmin*m; d and
    dmin set equal by random_blocks), draws each sub-block's scale sc and
    sets its min m to sc times the middle of q's range, so that its values
    straddle zero as a quantizer's do (random mins give every sub-block an
    offset of its own, a model far more sensitive to rounding than a
    trained one). The other random types' values are centred already."""
    if qt == Q.Q2_K:
        sc = rng.integers(1, 11, size=raw.shape[:2] + (16,))
        m = np.rint(1.5 * sc).astype(np.uint8)
        raw[:, :, 0:16] = sc.astype(np.uint8) | (m << 4)
    elif qt in (Q.Q4_K, Q.Q5_K):
        mid, top = (7.5, 8) if qt == Q.Q4_K else (15.5, 4)
        sc = rng.integers(1, top + 1, size=raw.shape[:2] + (8,)).astype(np.uint8)
        m = np.minimum(63, np.rint(mid * sc)).astype(np.uint8)
        s = np.zeros(raw.shape[:2] + (12,), dtype=np.uint8)
        # ggml's get_scale_min_k4 packing: pairs 0-3 in the low six bits of
        # bytes 0-3 (scales) and 4-7 (mins); pairs 4-7 split between the
        # nibbles of bytes 8-11 and the top two bits of bytes 0-7.
        s[..., 0:4] = sc[..., 0:4] | ((sc[..., 4:8] >> 4) << 6)
        s[..., 4:8] = m[..., 0:4] | ((m[..., 4:8] >> 4) << 6)
        s[..., 8:12] = (sc[..., 4:8] & 0xF) | ((m[..., 4:8] & 0xF) << 4)
        raw[:, :, 4:16] = s


def quantize(x, qt):
    """gguf.quants.quantize; for IQ4_NL, which gguf-py cannot quantize,
    the nearest of its sixteen levels with d = the block's largest
    magnitude / -127 (what a quantizer without importance weights starts
    from); for the K-quants and IQ4_XS random_blocks. Only the file's
    values matter, which gguf dequantizes."""
    if qt.name in RANDOM_BLOCK_SCALES and qt != Q.IQ4_NL:
        return random_blocks(x, qt)
    if qt != Q.IQ4_NL:
        return gguf.quants.quantize(x, qt)
    levels = np.array(gguf.quants.IQ4_NL.kvalues, dtype=np.float32)
    blocks = x.reshape(-1, 32).astype(np.float32)
    big = np.take_along_axis(blocks, np.abs(blocks).argmax(axis=1, keepdims=True), axis=1)
    d = (big / -127).astype(np.float16)
    inv = np.where(d == 0, 0, 1 / d.astype(np.float32))
    idx = np.abs((blocks * inv)[:, :, None] - levels[None, None, :]).argmin(axis=-1).astype(np.uint8)
    qs = idx[:, :16] | (idx[:, 16:] << 4)
    out = np.concatenate([d.view(np.uint8), qs], axis=1)
    return out.reshape(*x.shape[:-1], x.shape[-1] // 32 * 18)


def unpermute(w, n_head, n_head_kv):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    d = w.shape[0] // n_head // 2
    return w.reshape(n_head, d, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_version():
    from importlib.metadata import version
    return version("gguf")


# ------------------------------------------------------------- the real one
SMOL_TENSORS = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_norm.weight",
                "blk.17.ffn_down.weight", "blk.29.attn_output.weight", "output_norm.weight"]


def smollm2(path):
    path = Path(path)
    r = GGUFReader(str(path))
    ref = {"file": path.name, "size": path.stat().st_size, "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "tensors": {}}
    for t in r.tensors:
        if t.name not in SMOL_TENSORS:
            continue
        d = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        ref["tensors"][t.name] = {"type": t.tensor_type.name, "shape": list(d.shape), "sha256": f32_sha(d),
                                  "first": [float(v) for v in d.reshape(-1)[:8]], "sum": float(d.astype(np.float64).sum())}
    tokz = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokz.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(ids, dict):
        ids = ids["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(x).logits[0].double()
        gen = model.generate(x, max_new_tokens=24, do_sample=False)[0, len(ids):].tolist()
    lse = torch.logsumexp(logits, dim=-1)
    top = torch.topk(logits, 10, dim=-1)
    ref["prompt"] = msgs[0]["content"]
    ref["rendered"] = tokz.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    ref["ids"] = list(ids)
    ref["positions"] = [{"logsumexp": float(lse[i]), "top_ids": top.indices[i].tolist(), "top_logits": [float(v) for v in top.values[i]]}
                        for i in range(len(ids))]
    ref["greedy"] = gen
    ref["greedy_text"] = tokz.decode(gen)
    ref["transformers"] = transformers.__version__
    ref["gguf"] = gguf_version()
    (OUT / "smollm2.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print(f"smollm2: {len(ids)} prompt ids, greedy {tokz.decode(gen)!r}")


# ---------------------------------------------------------- Go's GGUF output
def check(dirname):
    d = Path(dirname)
    for f in sorted(d.glob("*.gguf")):
        r = GGUFReader(str(f))
        want = json.loads(f.with_suffix(".json").read_text())
        tensors = {t.name: t for t in r.tensors}
        worst = 0.0
        for name, w in want["tensors"].items():
            t = tensors[name]
            got = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
            if f32_sha(got) != w["sha256"]:
                worst = max(worst, float("inf"))
        types = sorted({t.tensor_type.name for t in r.tensors})
        model = AutoModelForCausalLM.from_pretrained(str(d), gguf_file=f.name, dtype=torch.float32).eval()
        with torch.no_grad():
            logits = model(torch.tensor([want["ids"]])).logits[0].float().numpy()
        go = np.array(want["logits"], dtype=np.float32).reshape(logits.shape)
        diff = float(np.abs(logits - go).max())
        keys = [k for k in r.fields if not k.startswith("GGUF.")]
        print(f"{f.name}: GGUFReader ok, {len(r.tensors)} tensors {types}, {len(keys)} keys, "
              f"tensors equal Go's: {worst == 0}, transformers vs Go logits max |diff| {diff:.3e} (scale {np.abs(go).max():.2f})")


def check_policy(dirname):
    """What TestGGUFCheckpointRoundTrip wrote (MLERL_POLICY_GGUF_ROUNDTRIP_DIR):
    the PEFT adapter on the GGUF base, the merged folder and the merged GGUF
    files, each loaded by transformers (and PEFT), against Go's logits."""
    from peft import PeftModel
    d = Path(dirname)
    go = json.loads((d / "go_logits.json").read_text())
    ids = torch.tensor([go["input_ids"]])
    want = np.array(go["logits"], dtype=np.float32)

    def report(what, model):
        with torch.no_grad():
            got = model(ids).logits[0].float().numpy()
        print(f"{what}: transformers vs Go logits max |diff| {np.abs(got - want).max():.3e} (scale {np.abs(want).max():.2f})")

    base = AutoModelForCausalLM.from_pretrained(str(d), gguf_file="base.gguf", dtype=torch.float32).eval()
    report("PEFT adapter on the GGUF base", PeftModel.from_pretrained(base, str(d / "adapter")).eval())
    report("merged folder", AutoModelForCausalLM.from_pretrained(str(d / "merged"), dtype=torch.float32).eval())
    tok = AutoTokenizer.from_pretrained(str(d / "merged"))
    text = "<|im_start|>user\nTrain 3 models in 12 minutes, then report.<|im_end|>"
    print(f"merged folder's tokenizer: {tok.__class__.__name__}, chat template {'set' if tok.chat_template else 'missing'}, "
          f"ids of a test string {tok.encode(text, add_special_tokens=False)[:12]}...")
    for f in ("merged-f32.gguf", "merged-q8_0.gguf"):
        report(f, AutoModelForCausalLM.from_pretrained(str(d), gguf_file=f, dtype=torch.float32).eval())


def generate(files):
    """Greedy answers of GGUF files (e.g. what `mlerl export gguf` wrote from
    the real SmolLM2 file) with gguf's reader and transformers."""
    for f in files:
        f = Path(f)
        r = GGUFReader(str(f))
        tok, _, out = greedy_answer(f)
        print(f"{f.name}: GGUFReader {len(r.tensors)} tensors {sorted({t.tensor_type.name for t in r.tensors})}; "
              f"transformers' greedy answer {out} {tok.decode(out)!r}")


def greedy_answer(f):
    """transformers' tokenizer for GGUF file f, the chat-rendered question
    and the model's greedy answer to it (24 new tokens at most), as ids."""
    tok = AutoTokenizer.from_pretrained(str(f.parent), gguf_file=f.name)
    m = AutoModelForCausalLM.from_pretrained(str(f.parent), gguf_file=f.name, dtype=torch.float32).eval()
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        out = m.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1]:].tolist()
    return tok, ids[0].tolist(), out


def mixes(source, files):
    """Writes testdata/mixes.json: for each GGUF file llama.cpp's
    llama-quantize made from source (scripts/gguf_mixes.sh), its sha256,
    how many tensors it holds of each type, and transformers' greedy
    answer to the question generate() asks, as token ids."""
    ref = {"source": Path(source).name, "source_sha256": file_sha(source),
           "llama_cpp": os.environ.get("LLAMA_CPP_BUILD", ""), "files": {}}
    answers = {}
    for f in files:
        f = Path(f)
        counts = {}
        # A split model (gguf-split's PREFIX-split-00001-of-0000N.gguf, the
        # first shard named) must answer as the whole file PREFIX.gguf,
        # named before it: transformers does not read splits.
        m = re.match(r"^(.*)-split-00001-of-(\d{5})\.gguf$", f.name)
        shards = [f] if not m else [f.with_name(f"{m[1]}-split-{i:05d}-of-{m[2]}.gguf") for i in range(1, int(m[2]) + 1)]
        for shard in shards:
            for t in GGUFReader(str(shard)).tensors:
                counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        tok, prompt, out = answers[m[1] + ".gguf"] if m else greedy_answer(f)
        answers[f.name] = (tok, prompt, out)
        ref["files"][f.name] = {"sha256": file_sha(f), "types": dict(sorted(counts.items())),
                                "prompt": prompt, "greedy": out, "text": tok.decode(out)}
        print(f"{f.name}: {dict(sorted(counts.items()))}; transformers' greedy answer {tok.decode(out)!r}")
    (OUT / "mixes.json").write_text(json.dumps(ref, indent=1) + "\n")


def file_sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "smollm2":
        smollm2(sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] == "check":
        check(sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] == "check-policy":
        check_policy(sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] == "generate":
        generate(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "mixes":
        mixes(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) > 1 and sys.argv[1] == "model":
        for n in sys.argv[2:]:
            write_model(n, MODELS[n])
    elif len(sys.argv) > 1 and sys.argv[1] == "quants":
        quant_files(set(sys.argv[2:]) or None)
    else:
        OUT.mkdir(parents=True, exist_ok=True)
        quant_files()
        for n, s in MODELS.items():
            write_model(n, s)
