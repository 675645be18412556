"""Issue 33: the SFT loss curves of two runs of the same recipe, fp32 and
bf16 products, compared step by step (metrics.jsonl of each checkpoint).

The check (stated before the runs): over the same steps, the bf16 curve's
mean over each window of 25 updates stays within 2% of fp32's, and the
final validation losses are within 2% of each other. Single-step losses
are printed too (they are noisier: one batch each).

    python3 bf16-compare.py FP32/metrics.jsonl BF16/metrics.jsonl
"""
import sys

from sftcurve import load


(a, va), (b, vb) = load(sys.argv[1]), load(sys.argv[2])
common = sorted(set(a) & set(b))
if not common:
    sys.exit("no common steps")
W = 25
ok = True
worst_step = max(abs(b[s] - a[s]) / a[s] for s in common)
print(f"steps compared: {len(common)} ({common[0]}..{common[-1]}); largest single-step gap {worst_step * 100:.2f}%")
print("| updates | fp32 mean loss | bf16 mean loss | gap |")
print("|---|---:|---:|---:|")
for i in range(0, len(common), W):
    win = common[i:i + W]
    ma = sum(a[s] for s in win) / len(win)
    mb = sum(b[s] for s in win) / len(win)
    gap = (mb - ma) / ma
    ok = ok and abs(gap) <= 0.02
    print(f"| {win[0]}-{win[-1]} | {ma:.4f} | {mb:.4f} | {gap * 100:+.2f}% |")
if va is not None and vb is not None:
    gap = (vb - va) / va
    ok = ok and abs(gap) <= 0.02
    print(f"validation loss: fp32 {va:.4f}, bf16 {vb:.4f} ({gap * 100:+.2f}%)")
else:
    print("validation loss: not recorded by both runs")
print("check (window means and validation within 2%):", "PASS" if ok else "FAIL")
