#!/usr/bin/env python3
"""PPO's health in two runs' metrics.jsonl: per block of updates, the mean
of reward, approx_kl, clip fraction, KL to the SFT policy, entropy and the
valid-action rate, side by side (issue 33: did the kernel changes move
PPO?).

    ppo-health.py NAME=metrics.jsonl NAME=metrics.jsonl [--blocks 4]
"""
import json
import sys

KEYS = [("charts/reward_mean", "reward"), ("losses/approx_kl", "approx_kl"),
        ("losses/clipfrac", "clipfrac"), ("losses/kl_ref", "kl_ref"),
        ("losses/entropy", "entropy"), ("charts/valid_action_rate", "valid")]


def updates(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
            if r.get("stage") == "ppo" and "losses/approx_kl" in r:
                rows.append(r)
    if not rows:
        sys.exit(f"{path}: no PPO update rows (stage ppo with losses/approx_kl)")
    return rows


def main(argv):
    blocks = 4
    runs = []
    i = 0
    while i < len(argv):
        if argv[i] == "--blocks":
            blocks = int(argv[i + 1])
            i += 2
            continue
        name, _, path = argv[i].partition("=")
        if not path:
            sys.exit(f"{argv[i]}: want NAME=path/to/metrics.jsonl")
        runs.append((name, updates(path)))
        i += 1
    if not runs:
        sys.exit(__doc__)
    print("| run | updates | " + " | ".join(k for _, k in KEYS) + " |")
    print("|---|---|" + "---:|" * len(KEYS))
    for name, rows in runs:
        n = len(rows)
        for b in range(blocks):
            part = rows[b * n // blocks:(b + 1) * n // blocks]
            if not part:
                continue
            cells = []
            for key, _ in KEYS:
                v = [r[key] for r in part if isinstance(r.get(key), (int, float))]
                cells.append(f"{sum(v) / len(v):.4f}" if v else "-")
            print(f"| {name} | {part[0]['step']}-{part[-1]['step']} | " + " | ".join(cells) + " |")
        print(f"| {name} | all {n} | " + " | ".join(
            f"{sum(r[k] for r in rows if isinstance(r.get(k), (int, float))) / max(1, sum(1 for r in rows if isinstance(r.get(k), (int, float)))):.4f}"
            for k, _ in KEYS) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
