"""The logits PEFT gives with a LoRA adapter on its base checkpoint.

Run by internal/interop's TestLlamaFactoryTrainsLoRA in the interop venv:
the reference its Go side compares policy/hf's Reference forward pass
(ReadAdapter on the adapter LLaMA-Factory wrote) against, so that mlerl
is shown to apply that adapter as PEFT does.

Usage: peft_logits.py BASE ADAPTER IDS_JSON
Prints a JSON list of rows (one per input id) of float32 logits.
"""

import json
import sys


def main():
    base, adapter, ids = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, adapter).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    print(json.dumps(logits.tolist()))


if __name__ == "__main__":
    main()
