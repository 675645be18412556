"""Issue 33, the second loss-curve check: bf16 against float32 SFT over
three seeds (the criterion was stated in BENCHMARKS.md before the runs).

For each window of 25 updates and each run, the window's mean training
loss; then over the three seeds the mean of float32's and of bf16's, and
float32's own range (lowest and highest seed). A window passes when
bf16's mean is within 2% of float32's mean, or inside float32's range
over the seeds (bf16 then trains as another float32 seed would); the
validation loss at the end is judged the same way. The check passes when
every window and the validation loss (where the data has one) pass. Paired gaps (bf16 - float32,
the same seed) are printed beside, for reading, not judged.

    python3 bf16-seeds.py CHECKPOINTS SEED...
"""
import sys

from sftcurve import load


root, seeds = sys.argv[1], sys.argv[2:]
runs = {(mode, s): load(f"{root}/sft-{mode}-s{s}/metrics.jsonl") for mode in ("fp32", "bf16") for s in seeds}
common = sorted(set.intersection(*(set(r[0]) for r in runs.values())))
if not common:
    sys.exit("no common steps")
W = 25
ok = True


def judge(f32, b16):
    mf, mb = sum(f32) / len(f32), sum(b16) / len(b16)
    gap = (mb - mf) / mf
    inside = min(f32) <= mb <= max(f32)
    return mf, mb, gap, inside, abs(gap) <= 0.02 or inside


print(f"seeds {', '.join(seeds)}; steps compared: {len(common)} ({common[0]}..{common[-1]})")
print("| updates | fp32 mean (range over seeds) | bf16 mean | gap of the means | paired gaps by seed | verdict |")
print("|---|---:|---:|---:|---|---|")
for i in range(0, len(common), W):
    win = common[i:i + W]
    wm = {k: sum(r[0][s] for s in win) / len(win) for k, r in runs.items()}
    f32 = [wm[("fp32", s)] for s in seeds]
    b16 = [wm[("bf16", s)] for s in seeds]
    mf, mb, gap, inside, good = judge(f32, b16)
    ok = ok and good
    paired = ", ".join(f"{(wm[('bf16', s)] - wm[('fp32', s)]) / wm[('fp32', s)] * 100:+.1f}%" for s in seeds)
    print(f"| {win[0]}-{win[-1]} | {mf:.4f} ({min(f32):.4f}-{max(f32):.4f}) | {mb:.4f} | {gap * 100:+.2f}% | {paired} | "
          f"{'pass' if good else 'FAIL'}{' (inside the range)' if inside and abs(gap) > 0.02 else ''} |")
vals = {k: r[1] for k, r in runs.items()}
if all(v is not None for v in vals.values()):
    f32 = [vals[("fp32", s)] for s in seeds]
    b16 = [vals[("bf16", s)] for s in seeds]
    mf, mb, gap, inside, good = judge(f32, b16)
    ok = ok and good
    print(f"validation loss: fp32 {mf:.4f} ({min(f32):.4f}-{max(f32):.4f}), bf16 {mb:.4f} ({gap * 100:+.2f}%): {'pass' if good else 'FAIL'}")
else:
    print("validation loss: not recorded by every run (the demo data has no held-out examples): not judged")
print("check (every window and the validation loss: within 2% of float32's mean or inside its range over the seeds):",
      "PASS" if ok else "FAIL")
