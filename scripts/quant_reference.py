#!/usr/bin/env python3
"""Makes policy/native/testdata/quant_blocks.json, the reference of the
native engine's quantized base storage (policy/native/quant.go).

Run from the repository root with the pinned venv (scripts/setup_pyref.sh):

    .deps/pyref/bin/python scripts/quant_reference.py

It writes, deterministically (a fixed seed), 4 rows of 96 float32 values
(normal draws scaled per row, with a few edge blocks: all zero, one value,
equal values, a large magnitude), then for Q8_0, Q4_0 and Q4_1 the bytes
the gguf package's quantizer (ggml's quantize_row_*_ref) writes for them,
as hex, and its dequantization of those bytes. TestQuantizeMatchesGGUF
holds native's quantizers and dequantization to them bit for bit.
"""
import json
import pathlib

import numpy as np
import gguf

OUT = pathlib.Path(__file__).resolve().parent.parent / "policy" / "native" / "testdata" / "quant_blocks.json"


def main():
    rng = np.random.default_rng(61)
    rows, cols = 4, 96
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x *= np.array([[0.02], [0.7], [3.0], [40.0]], dtype=np.float32)
    x[0, 0:32] = 0                        # an all-zero block (d = 0)
    x[1, 32:64] = 0
    x[1, 40] = -1.5                       # one value: Q4_0's max by magnitude is negative
    x[2, 64:96] = 0.25                    # equal values (Q4_1: d = 0)
    x[3, 5] = 60000.0                     # a large magnitude (d near float16's range)
    ref = {"rows": rows, "cols": cols, "input": [float(v) for v in x.reshape(-1)], "types": {}}
    for qt in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1):
        blocks = gguf.quants.quantize(x, qt)
        deq = gguf.quants.dequantize(blocks, qt).astype(np.float32).reshape(-1)
        ref["types"][qt.name] = {"blocks": blocks.tobytes().hex(), "dequantized": [float(v) for v in deq]}
    OUT.write_text(json.dumps(ref, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
