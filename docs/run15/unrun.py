#!/usr/bin/env python3
"""Run 15's evaluation trajectories, counted as evaluate's behaviour table
counts them since run 15's binary (which predates the column): how many end
on a change to the script that no run followed (a successful edit or undo
after the last Execute Script), how many have a Final Answer, how many end on
an edit step.

Input: JSON lines from `mlerl head --json` of each evaluation dataset
(xp-run15-s<S>-<arm>-s<S>/v1 in run 14's data root), named <arm>-<S>.jsonl:
    python3 docs/run15/unrun.py DIR
"""
import glob
import json
import os
import sys

CHANGES = ("Edit Script (AI)", "Undo Edit Script")


def main(d):
    for arm in ("sft", "sft+ppo"):
        for split in ("held-out", "held-in"):
            n = unrun = final = last_edit = 0
            for f in sorted(glob.glob(os.path.join(d, f"{arm}-*.jsonl"))):
                for line in open(f):
                    r = json.loads(line)
                    if r["split"] != split:
                        continue
                    n += 1
                    acts, outs = r["actions"], r["outcomes"]
                    last_run = max((i for i, a in enumerate(acts) if a == "Execute Script"), default=-1)
                    if any(a in CHANGES and o == "success" for a, o in zip(acts[last_run + 1:], outs[last_run + 1:])):
                        unrun += 1
                    final += "Final Answer" in acts
                    last_edit += bool(acts) and acts[-1] == "Edit Script (AI)"
            if n:
                print(f"{split:8} {arm:7} trajectories {n:3}  end on an unrun change {unrun:3} ({100 * unrun / n:.0f}%)"
                      f"  Final Answer {final:3} ({100 * final / n:.0f}%)  last action an edit {last_edit:3}")


if __name__ == "__main__":
    main(sys.argv[1])
