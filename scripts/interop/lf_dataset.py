"""LLaMA-Factory reads mlerl's ShareGPT export as mlerl means it.

Run by internal/interop's TestLlamaFactoryReadsExport in the interop
venv (scripts/setup_interop.sh). Loads every entry of the
dataset_info.json `mlerl dataset` wrote, unedited, with LLaMA-Factory's
own loader, converter, template and supervised processor, then checks
every row of its file:

  - no row is skipped (a wrong role tag or turn order makes LLaMA-Factory
    drop a row with only a warning);
  - the prompt LLaMA-Factory trains on equals the checkpoint's own chat
    template (apply_chat_template with the generation prompt, Qwen3's
    without thinking) on the export's system prompt and human turn,
    token for token: nothing dropped, renamed, added or truncated;
  - the loss covers exactly the gpt turn and its end of turn, and
    nothing follows it;
  - with the *_tools entry, every tool of the tools column appears in
    the system prompt LLaMA-Factory renders;
  - for the entries SPEC's policy_prompts names (mlerl_sft_policy), the
    prompt LLaMA-Factory trains on is also, token for token, the prompt
    mlerl's Hugging Face policy reads for the same state (the ids the Go
    test computed with policy.EncodePrompt), so that the adapter is
    evaluated in mlerl on what it learned.

A row LLaMA-Factory truncated at an entry's cutoff_len fails the prompt
check (it keeps the prompt's start and cuts the rest), so passing the
longest example mlerl's stats declare as the entry's cutoff_len checks
that declaration.

Usage: lf_dataset.py CHECKPOINT TEMPLATE DATASET_DIR SPEC
SPEC is a JSON file: {"tool_format": "default", "cutoff_len": {ENTRY: N},
"policy_prompts": {ENTRY: [[id, ...] per row]}} (an entry without a
cutoff_len gets no cutoff). Prints one JSON object: per dataset_info.json
entry, its file's rows, the rows kept and the longest example in tokens;
exits 1 with a message on the first mismatch.
"""

import json
import os
import sys
import tempfile


def fail(msg):
    print("lf_dataset: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ckpt, template_name, dataset_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(sys.argv[4]) as f:
        spec = json.load(f)
    tool_format = spec.get("tool_format")
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer
    from transformers import AutoTokenizer

    with open(os.path.join(dataset_dir, "dataset_info.json")) as f:
        info = json.load(f)
    # The checkpoint's own tokenizer and template, untouched by
    # LLaMA-Factory's fix_special_tokens: the reference.
    ref = AutoTokenizer.from_pretrained(ckpt)
    out = {"datasets": {}}
    for name, entry in info.items():
        with open(os.path.join(dataset_dir, entry["file_name"])) as f:
            records = [json.loads(line) for line in f]
        cutoff = spec.get("cutoff_len", {}).get(name, 1 << 20)
        policy_prompts = spec.get("policy_prompts", {}).get(name)
        if policy_prompts is not None and len(policy_prompts) != len(records):
            fail(f"{name}: {len(policy_prompts)} policy prompts for {len(records)} rows")
        work = tempfile.mkdtemp(prefix="lf-")
        args = {
            "model_name_or_path": ckpt, "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "dataset": name, "dataset_dir": dataset_dir, "template": template_name,
            # An entry SPEC gives no cutoff_len gets none (the tools entry
            # renders the tools into the system prompt a second time, past
            # what mlerl counts).
            "cutoff_len": cutoff,
            "overwrite_cache": True, "preprocessing_num_workers": 1,
            "output_dir": work, "report_to": "none",
        }
        if tool_format:
            args["tool_format"] = tool_format
        model_args, data_args, training_args, _, _ = get_train_args(args)
        tm = load_tokenizer(model_args)
        tok = tm["tokenizer"]
        template = get_template_and_fix_tokenizer(tok, data_args)
        ds = get_dataset(template, model_args, data_args, training_args, stage="sft", **tm)["train_dataset"]
        if len(ds) != len(records):
            fail(f"{name}: LLaMA-Factory kept {len(ds)} of {len(records)} rows (it skips rows whose roles it does not accept)")
        longest = 0
        for i, (ex, rec) in enumerate(zip(ds, records)):
            conv = rec["conversations"]
            ids, labels = ex["input_ids"], ex["labels"]
            longest = max(longest, len(ids))
            if name.endswith("_tools"):
                text = tok.decode(ids)
                for t in json.loads(rec["tools"]):
                    if t["name"] not in text:
                        fail(f"{name} row {i}: tool {t['name']!r} of the tools column is not in the prompt LLaMA-Factory rendered")
                continue
            msgs = [{"role": "user", "content": conv[0]["value"]}]
            if rec["system"]:
                msgs.insert(0, {"role": "system", "content": rec["system"]})
            # What the policy reads before answering: the checkpoint's
            # template with the generation prompt (Qwen3's without
            # thinking, as mlerl and verl prompt it).
            want_prompt = ref.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False, enable_thinking=False)
            first = next((j for j, t in enumerate(labels) if t != -100), len(labels))
            if list(ids[:first]) != list(want_prompt):
                a, b = tok.decode(ids[:first]), ref.decode(want_prompt)
                k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
                cut = f" (the example is {len(ids)} tokens, cutoff_len {cutoff}: LLaMA-Factory cut it)" if len(ids) >= cutoff else ""
                fail(f"{name} row {i}: the prompt LLaMA-Factory trains on differs from the checkpoint's chat template at char {k}{cut}: "
                     f"LLaMA-Factory {a[max(0, k-60):k+60]!r} vs template {b[max(0, k-60):k+60]!r}")
            if policy_prompts is not None and list(ids[:first]) != policy_prompts[i]:
                a, b = tok.decode(ids[:first]), ref.decode(policy_prompts[i])
                k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
                fail(f"{name} row {i}: the prompt LLaMA-Factory trains on differs from the one mlerl's policy reads at char {k}: "
                     f"LLaMA-Factory {a[max(0, k-60):k+60]!r} vs mlerl {b[max(0, k-60):k+60]!r}")
            answer = list(labels[first:])
            want_answer = ref(conv[1]["value"], add_special_tokens=False)["input_ids"]
            if answer != list(ids[first:]) or answer[: len(want_answer)] != want_answer or tok.decode(answer[len(want_answer):]).strip() != "<|im_end|>":
                fail(f"{name} row {i}: the loss covers {tok.decode(answer)[:120]!r}..., not the whole answer and its end of turn")
        out["datasets"][name] = {"file_rows": len(records), "rows": len(ds), "longest_tokens": longest}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
