"""verl's reward path scores answers with mlerl's environment.

Run by internal/interop's TestVerlRewardThroughServeEnv in the interop
venv, with a live `mlerl serve-env` at MLERL_ENV_URL (its token in
MLERL_SERVE_TOKEN_FILE, its CA in MLERL_ENV_CA_FILE for https). It builds
verl's own trainer config (hydra, ppo_trainer.yaml) with
reward.custom_reward_function pointing at scripts/verl_reward.py, makes
the reward worker verl's trainer makes (RewardLoopWorker: the registered
"naive" reward manager calling the custom function), and scores a batch
laid out as verl's rollout hands it over: each row's prompt as the
checkpoint's chat template renders it, left-padded, the response
right-padded, the non-tensor columns read from the export by verl's
RLHFDataset.

Responses: each one given (the expert's action of its row, as the Go
side reads it from ground_truth, or a malformed answer) is encoded with
the checkpoint's tokenizer and ended with <|im_end|>, and verl decodes it
back. Prints one JSON object per response: index, state_id,
snapshot_ref, the text verl decoded (solution_str) and verl's score (the
rm_scores entry at the response's last token).

Usage: verl_reward_check.py CHECKPOINT PARQUET SPEC_JSON
  SPEC_JSON: a JSON list of {"row": <row of the Parquet file>, "text": <response>}
"""

import json
import os
import sys


def main():
    ckpt, parquet, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    import numpy as np
    import torch
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker, migrate_legacy_reward_impl
    from verl.utils.dataset.rl_dataset import RLHFDataset

    reward_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verl_reward.py")
    conf_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=conf_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={ckpt}",
            f"data.train_files={parquet}",
            f"reward.custom_reward_function.path={os.path.abspath(reward_py)}",
            "reward.custom_reward_function.name=compute_score",
        ])
    config = migrate_legacy_reward_impl(config)
    tok = AutoTokenizer.from_pretrained(ckpt)
    data_cfg = OmegaConf.create({"max_prompt_length": 1 << 20, "filter_overlong_prompts": False,
                                 "cache_dir": os.environ.get("VERL_CACHE", "/tmp/verl-cache")})
    ds = RLHFDataset(parquet, tok, data_cfg)

    items = [(s["row"], s["text"]) for s in spec]

    prompts, responses = [], []
    for r, text in items:
        prompts.append(tok.apply_chat_template(ds[r]["raw_prompt"], add_generation_prompt=True, tokenize=True, return_dict=False))
        responses.append(tok(text, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")])
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    P, R = max(map(len, prompts)), max(map(len, responses))
    b_prompts = torch.full((len(items), P), pad, dtype=torch.long)
    b_responses = torch.full((len(items), R), pad, dtype=torch.long)
    b_mask = torch.zeros((len(items), P + R), dtype=torch.long)
    for i, (p, s) in enumerate(zip(prompts, responses)):
        b_prompts[i, P - len(p):] = torch.tensor(p)  # left padding, as verl's rollout
        b_responses[i, : len(s)] = torch.tensor(s)  # right padding
        b_mask[i, P - len(p): P + len(s)] = 1
    non_tensor = {k: np.array([ds[r][k] for r, _ in items], dtype=object) for k in ("data_source", "reward_model", "extra_info")}
    batch = DataProto.from_dict(
        tensors={"prompts": b_prompts, "responses": b_responses, "attention_mask": b_mask,
                 "input_ids": torch.cat([b_prompts, b_responses], dim=1)},
        non_tensors=non_tensor)

    worker = RewardLoopWorker(config)
    # The worker and its reward manager keep the event loop they were made
    # on (a Ray actor runs their coroutines there).
    outs = worker.loop.run_until_complete(worker.compute_score_batch(batch))
    scores = [o["reward_score"] for o in outs]
    rm = worker.reward_manager.assemble_rm_scores(batch, scores)
    for i, ((r, _), o) in enumerate(zip(items, outs)):
        row = ds[r]
        gt = json.loads(row["reward_model"]["ground_truth"])
        last = int(b_mask[i, P:].sum()) - 1
        print(json.dumps({
            "index": r, "state_id": row["extra_info"].get("state_id", ""), "snapshot_ref": gt["snapshot_ref"],
            "solution_str": tok.decode(b_responses[i, : last + 1], skip_special_tokens=True),
            "score": float(rm[i, last]), "reward_score": o["reward_score"],
        }))


if __name__ == "__main__":
    main()
