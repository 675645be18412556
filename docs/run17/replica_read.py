#!/usr/bin/env python3
"""replica_read.py [ROWS]: the replica's SFT episodes (docs/run17/replica/rows.jsonl,
eval_results rows as `mlerl head --json` prints them): per split, how many
made a better script than the initial one (a graded run above m_init on the
private part: best_score) and how many kept it to the end, the action
sequences of those that lost it, and the largest loss step by step.
"""
import json, sys
from collections import Counter

path = sys.argv[1] if len(sys.argv) > 1 else "docs/run17/replica/rows.jsonl"
rows = [json.loads(l) for l in open(path)]
short = {"Execute Script": "Run", "Edit Script (AI)": "Edit", "Undo Edit Script": "Undo", "Final Answer": "Final", "List Files": "List", "Understand File": "Understand"}


def better(r, score):
    if score is None:
        return False
    return score < r["m_init"] if r["direction"] == "lower" else score > r["m_init"]


def seq(r):
    return " > ".join(short.get(a, a) for a in r["actions"])


lost = []
for split in ("held-out", "held-in"):
    rs = [r for r in rows if r["split"] == split]
    found = [r for r in rs if better(r, r["best_score"])]
    kept = [r for r in found if better(r, r["final_score"])]
    print(f"{split}: {len(rs)} episodes, {len(found)} found a better script, {len(kept)} kept it")
    for s, c in Counter(seq(r) for r in found if r not in kept).most_common():
        print(f"  lost, {c}x: {s}")
    for s, c in Counter(seq(r) for r in rs).most_common(3):
        print(f"  all episodes, {c}x: {s}")
    lost += [r for r in found if r not in kept and split == "held-out"]
if lost:
    r = max(lost, key=lambda r: abs(r["best_score"] - r["m_init"]) / abs(r["m_init"]))
    print(f"\nthe largest held-out loss: {r['task_id']} trajectory {r['trajectory']}, {r['metric']} ({r['direction']} is better): "
          f"initial {r['m_init']:.4g}, its best run {r['best_score']:.4g}, final {r['final_score']:.4g} (private part)")
    for i, (a, ans, fb) in enumerate(zip(r["actions"], r["answers"], r["feedback"])):
        inp = next((l for l in ans.splitlines() if l.startswith("Action Input:")), "")
        print(f"  step {i + 1}: {a}  {inp[len('Action Input: '):][:160]}\n    -> {fb.splitlines()[0][:120] if fb else ''}")
