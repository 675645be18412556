"""The SFT loss curve of a train sft checkpoint's metrics.jsonl, shared by
bf16-compare.py and bf16-seeds.py."""
import json


def load(path):
    """Returns ({step: training loss}, the last validation loss or None)."""
    steps, val = {}, None
    for line in open(path):
        m = json.loads(line)
        if "losses/sft" in m:
            steps[m["step"]] = m["losses/sft"]
        if "losses/val" in m:
            val = m["losses/val"]
    return steps, val
