#!/usr/bin/env python3
"""why.py SEED_DIR...: what run 17's rows say about why an arm did or did not
close headroom, and what each seed cost.

For each arm and split, over the trajectories of the seeds given:
- improved: the final score (the submission standing at the end) is better
  than the initial script's;
- found: some graded run during the episode was better than the initial
  script (best_score: the run the public part ranked best, scored on the
  private part);
- found, not kept: found but not improved at the end (the better script was
  undone, edited over, or left for a worse last run).
Then, per seed, the SmolLM2 lane's costs from its rows and PPO metrics:
training wall time (the stage's last process only, so a cell resumed after
an interruption shows its last leg; docs/science/run17.md), PPO's own
wall and CPU clock at its last update (kept across legs by its checkpoints),
and each cell's evaluation wall time.
"""
import json, sys
from collections import defaultdict


def better(r, score):
    if score is None:  # no graded run in the episode
        return False
    return score > r["m_init"] if r["direction"] == "higher" else score < r["m_init"]


rows = []
for d in sys.argv[1:]:
    for path, suffix in ((f"{d}/rows.jsonl", ""), (f"{d}/5m/rows.jsonl", "-5m")):
        try:
            for line in open(path):
                r = json.loads(line)
                r["arm"] += suffix
                rows.append(r)
        except FileNotFoundError:
            print(f"note: {path} is not there")
if not rows:
    sys.exit("usage: why.py docs/run17/seed-<S>...")

print("trajectories: improved at the end / found a better run during the episode / found, not kept")
order = ("expert", "policy", "sft", "sft+ppo", "sft-5m", "sft+ppo-5m")
for split in ("held-out", "held-in"):
    for arm in order:
        rs = [r for r in rows if r["arm"] == arm and r["split"] == split]
        if not rs:
            continue
        imp = sum(better(r, r["final_score"]) for r in rs)
        found = sum(better(r, r["best_score"]) for r in rs)
        lost = sum(better(r, r["best_score"]) and not better(r, r["final_score"]) for r in rs)
        print(f"  {split:8s} {arm:11s} n={len(rs):3d}  improved {imp:3d} ({100*imp/len(rs):3.0f}%)  found {found:3d} ({100*found/len(rs):3.0f}%)  found, not kept {lost:3d}")

print("\ncosts per seed (SmolLM2 lane): train wall (last leg), PPO clock at its last update, evaluation wall per cell")
for d in sys.argv[1:]:
    try:
        rs = [json.loads(l) for l in open(f"{d}/rows.jsonl")]
    except FileNotFoundError:
        continue
    cell = defaultdict(dict)
    for r in rs:
        cell[r["arm"]] = (r["train_wall_s"], r["eval_wall_s"])
    ppo = [json.loads(l) for l in open(f"{d}/ppo-metrics.jsonl")]
    last = [m for m in ppo if m.get("stage") != "ppo-curve" and "time/wall_s" in m]
    steps = [m.get("time/update_s") for m in last if m.get("time/update_s")]
    w = last[-1]["time/wall_s"] if last else float("nan")
    c = last[-1]["time/cpu_s"] if last else float("nan")
    seed = d.rstrip("/").split("-")[-1]
    ev = ", ".join(f"{a} {cell[a][1]/60:.0f} min" for a in ("initial", "sft", "sft+ppo") if a in cell)
    upd = f"{min(steps):.0f}-{max(steps):.0f} s an update (median {sorted(steps)[len(steps)//2]:.0f})" if steps else "no update times"
    print(f"  {seed}: sft train {cell['sft'][0]/60:.0f} min; ppo {w/3600:.2f} h wall, {c/3600:.2f} h CPU, {upd}; eval: {ev} (initial: the baselines cell, initial, expert and policy together)")
