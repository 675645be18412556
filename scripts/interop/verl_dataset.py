"""verl's own dataset class reads mlerl's verl export.

Run by internal/interop's TestVerlLoadsExport in the interop venv.
Loads PARQUET with verl's RLHFDataset (the class its trainer builds for
data.train_files and data.val_files) and the checkpoint's tokenizer and
chat template, once per data.max_prompt_length in LIMITS with
filter_overlong_prompts on, as the trainer does, and reports how many
rows verl kept at each. With the unfiltered dataset it checks every row
as verl's rollout and reward function receive it: the prompt messages
(raw_prompt) are the Parquet's, the reward model is rule-based with a
JSON ground truth naming a snapshot, extra_info carries the row's index.
Given POLICY_IDS (a JSON file: per row, the token ids mlerl's Hugging
Face policy reads for the row's state, from policy.EncodePrompt), it also
checks that the prompt verl's rollout sends to the model (its agent
loop's Continuous Token builder for the checkpoint's model_type,
build_initial_tokens on raw_prompt) is those ids, token for token.

Usage: verl_dataset.py CHECKPOINT PARQUET LIMIT[,LIMIT...] [POLICY_IDS]
Prints one JSON object: rows, kept per limit, the longest prompt as
verl's filter measures it, and how many rollout prompts equal mlerl's;
exits 1 with a message on the first bad row.
"""

import json
import os
import sys


def fail(msg):
    print("verl_dataset: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ckpt, parquet, limits = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    policy_ids = None
    if len(sys.argv) > 4:
        with open(sys.argv[4]) as f:
            policy_ids = json.load(f)
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    tok = AutoTokenizer.from_pretrained(ckpt)
    with open(os.path.join(ckpt, "config.json")) as f:
        model_type = json.load(f)["model_type"]
    # What verl's agent loop builds for the rollout (no
    # apply_chat_template_kwargs: a Qwen3 policy needs enable_thinking
    # false there, as mlerl prompts it).
    builder = create_continuous_token_builder(tok, hf_model_type=model_type)
    cache = os.environ.get("VERL_CACHE", "/tmp/verl-cache")

    def load(limit, filt):
        cfg = OmegaConf.create({"max_prompt_length": limit, "filter_overlong_prompts": filt, "truncation": "error",
                                "filter_overlong_prompts_workers": 1, "cache_dir": cache})
        return RLHFDataset(parquet, tok, cfg)

    table = pq.read_table(parquet).to_pylist()
    ds = load(1 << 30, False)
    if len(ds) != len(table):
        fail(f"{parquet}: verl read {len(ds)} rows, the file has {len(table)}")
    if policy_ids is not None and len(policy_ids) != len(table):
        fail(f"{len(policy_ids)} policy prompts for {len(table)} rows")
    longest, same = 0, 0
    for i in range(len(ds)):
        row, want = ds[i], table[i]
        if row["raw_prompt"] != want["prompt"]:
            fail(f"row {i}: verl's raw_prompt {row['raw_prompt']!r:.200} is not the file's prompt {want['prompt']!r:.200}")
        rm = row["reward_model"]
        gt = json.loads(rm["ground_truth"])
        if rm["style"] != "rule" or not gt.get("snapshot_ref", "").startswith("sha256:"):
            fail(f"row {i}: reward_model {rm!r:.200}: want style rule and a ground truth with the snapshot_ref")
        if row["index"] != want["extra_info"]["index"] or row["data_source"] != want["data_source"]:
            fail(f"row {i}: verl's index {row['index']} / data_source {row['data_source']!r} differ from extra_info's")
        # What verl's filter_overlong_prompts measures.
        ids = tok.apply_chat_template(row["raw_prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
        longest = max(longest, len(ids))
        if policy_ids is not None:
            rollout = list(builder.build_initial_tokens(list(row["raw_prompt"])))
            if rollout != policy_ids[i]:
                a, b = tok.decode(rollout), tok.decode(policy_ids[i])
                k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
                fail(f"row {i}: the prompt verl's rollout builds differs from the one mlerl's policy reads at char {k}: "
                     f"verl {a[max(0, k-60):k+60]!r} vs mlerl {b[max(0, k-60):k+60]!r}")
            same += 1
    kept = {str(limit): len(load(limit, True)) for limit in limits}
    print(json.dumps({"rows": len(ds), "kept": kept, "longest": longest, "policy_prompts_equal": same}))


if __name__ == "__main__":
    main()
