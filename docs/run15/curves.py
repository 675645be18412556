#!/usr/bin/env python3
"""Run 15's PPO training curves, per seed: samples trained per update, and
at updates 1, 20 and 40 the mean return, approx_kl, clipfrac, decision-token
entropy and KL to the SFT policy (train ppo's metrics.jsonl in run 14's data
root, checkpoints/xp-run15-s<S>/s<S>/sft+ppo/).
    python3 docs/run15/curves.py $RUNS/run14/root/checkpoints
Another run's seeds: curves.py CHECKPOINTS RUN SEED... (e.g. run16 63 64 65).
"""
import json
import sys

KEYS = ("charts/return_mean", "losses/approx_kl", "losses/clipfrac", "losses/entropy", "losses/kl_ref")


def main(root, run="run15", seeds=(51, 52, 53, 54, 55)):
    print("seed  updates  samples/update  " + "  ".join(f"{k.split('/')[-1]} (1 / 20 / 40)" for k in KEYS))
    for s in seeds:
        rows = [json.loads(l) for l in open(f"{root}/xp-{run}-s{s}/s{s}/sft+ppo/metrics.jsonl")]
        ups = [r for r in rows if "charts/samples" in r]
        n = [r["charts/samples"] for r in ups]
        cols = []
        for k in KEYS:
            vals = [ups[i].get(k) for i in (0, 19, len(ups) - 1)]
            cols.append(" / ".join("absent" if v is None else f"{v:.3f}" for v in vals))
        print(f"{s}    {len(ups)}       {min(n)}-{max(n)}           " + "  ".join(cols))


if __name__ == "__main__":
    if len(sys.argv) > 2:
        main(sys.argv[1], sys.argv[2], [int(a) for a in sys.argv[3:]])
    else:
        main(sys.argv[1])
