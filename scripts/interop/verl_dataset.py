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

Usage: verl_dataset.py CHECKPOINT PARQUET LIMIT[,LIMIT...]
Prints one JSON object: rows, kept per limit, and the longest prompt as
verl's filter measures it; exits 1 with a message on the first bad row.
"""

import json
import os
import sys


def fail(msg):
    print("verl_dataset: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ckpt, parquet, limits = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    import pyarrow.parquet as pq
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tok = AutoTokenizer.from_pretrained(ckpt)
    cache = os.environ.get("VERL_CACHE", "/tmp/verl-cache")

    def load(limit, filt):
        cfg = OmegaConf.create({"max_prompt_length": limit, "filter_overlong_prompts": filt, "truncation": "error",
                                "filter_overlong_prompts_workers": 1, "cache_dir": cache})
        return RLHFDataset(parquet, tok, cfg)

    table = pq.read_table(parquet).to_pylist()
    ds = load(1 << 30, False)
    if len(ds) != len(table):
        fail(f"{parquet}: verl read {len(ds)} rows, the file has {len(table)}")
    longest = 0
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
    kept = {str(limit): len(load(limit, True)) for limit in limits}
    print(json.dumps({"rows": len(ds), "kept": kept, "longest": longest}))


if __name__ == "__main__":
    main()
