#!/usr/bin/env python3
"""probe.py BIN ROOT CHECKPOINT OUT: run 17b's keep-or-undo probe.

Takes every held-in SFT example of the data root ROOT whose state comes
right after an edit and its run (the prompt's last two recent steps are
an Edit Script and an Execute Script) and whose expert answer is Final
Answer or Undo Edit Script; asks the checkpoint for its greedy answer to
each prompt as SFT rendered it (`mlerl generate --stage_prompt`); and
writes OUT/answers.jsonl (one line per prompt) and OUT/summary.json: per
expert class the prompts and the share the checkpoint answered Undo Edit
Script, with Wilson 95% intervals, and the balanced accuracy of undo
against keep (the mean of the two classes' right shares). Rerunning
resumes: answers already in OUT/answers.jsonl are kept.
"""
import json
import math
import os
import re
import subprocess
import sys

STEP = re.compile(r"^\d+\. (.+?) -> ")
ACTION = re.compile(r"^Action:\s*(.+?)\s*$", re.M)
CLASSES = ("Final Answer", "Undo Edit Script")


def recent_steps(prompt):
    """The action names of the prompt's recent steps, in order."""
    if "Recent steps:" not in prompt:
        return []
    block = prompt.split("Recent steps:", 1)[1]
    return [m.group(1) for m in (STEP.match(l) for l in block.splitlines()) if m]


def expert_action(response):
    m = ACTION.search(response)
    return m.group(1) if m else ""


def select(rows):
    out = []
    for r in rows:
        steps = recent_steps(r["prompt"])
        if r["split"] != "held-in" or len(steps) < 2:
            continue
        if not steps[-2].startswith("Edit Script") or steps[-1] != "Execute Script":
            continue
        a = expert_action(r["response"])
        if a in CLASSES:
            out.append({"id": r["example_id"], "task": r["task_id"], "expert": a, "prompt": r["prompt"]})
    return out


def wilson(k, n, z=1.96):
    if n == 0:
        return [float("nan"), float("nan")]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [c - h, c + h]


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    bin_, root, ck, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    rows = [json.loads(l) for l in subprocess.run([bin_, "head", "--json", "-n", "1000000", os.path.join(root, "sft_examples")],
                                                  check=True, capture_output=True, text=True).stdout.splitlines() if l.strip()]
    todo = select(rows)
    path = os.path.join(out, "answers.jsonl")
    done = {}
    if os.path.exists(path):
        for l in open(path):
            a = json.loads(l)
            done[a["id"]] = a
    with open(path, "a") as f:
        for i, t in enumerate(todo):
            if t["id"] in done:
                continue
            p = subprocess.run([bin_, "generate", "--data", root, "--checkpoint", ck, "--stage_prompt", "--prompt_file", "-",
                                "--max_new_tokens", "40"], input=t["prompt"], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"probe: generate failed on {t['id']}: {p.stderr[-2000:]}")
            a = {"id": t["id"], "task": t["task"], "expert": t["expert"], "answer": expert_action(p.stdout), "text": p.stdout}
            done[t["id"]] = a
            f.write(json.dumps(a) + "\n")
            f.flush()
            print(f"probe: {i + 1}/{len(todo)} {t['id']}: expert {t['expert']}, answer {a['answer']}", flush=True)
    summary = {"checkpoint": ck, "prompts": len(todo), "classes": {}}
    right = []
    for c in CLASSES:
        ans = [done[t["id"]]["answer"] for t in todo if t["expert"] == c]
        undo = sum(a == "Undo Edit Script" for a in ans)
        ok = undo if c == "Undo Edit Script" else len(ans) - undo
        summary["classes"][c] = {"n": len(ans), "answered_undo": undo, "undo_share": undo / max(len(ans), 1),
                                 "right": ok, "right_share": ok / max(len(ans), 1), "right_wilson95": wilson(ok, len(ans)),
                                 "answers": {a: ans.count(a) for a in sorted(set(ans))}}
        right.append(ok / max(len(ans), 1))
    summary["balanced_accuracy"] = sum(right) / len(right)
    json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
