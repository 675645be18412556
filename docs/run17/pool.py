#!/usr/bin/env python3
"""pool.py SEED_DIR...: run 17's questions over the seeds' committed rows.

Each SEED_DIR is docs/run17/seed-<S>/: rows.jsonl holds the SmolLM2 grid's
rows (arms initial, expert, policy = SmolLM2-135M-Instruct prompted as it
is, sft, sft+ppo), and 5m/rows.jsonl, when there, the rows of run 16's
recipe for mlerl's own 5M-parameter model on the same data root and seed
(arms sft, sft+ppo; read as sft-5m, sft+ppo-5m). Every score is the
private part's (schema 1.7's scored_on: private).

Prints, per split, each arm's mean delta_r and share of the headroom
closed, and the declared paired differences over (seed, task) units (per
unit: the mean over its trajectories) with 95% Student-t intervals: run
16's statistic (experiment/report.go pairedUnits). Then public minus
private per arm, the behaviour tables of the SFT and SFT + PPO cell
reports (SmolLM2's), and each seed's checkpoint selection.
"""
import csv, glob, json, math, re, sys
from collections import defaultdict


def betacf(a, b, x):
    # continued fraction of the regularized incomplete beta (Lentz)
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > 1e-300 else 1e-300)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d; d = 1 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1 + aa / c if abs(1 + aa / c) > 1e-300 else 1e-300
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d; d = 1 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1 + aa / c if abs(1 + aa / c) > 1e-300 else 1e-300
        de = d * c
        h *= de
        if abs(de - 1) < 1e-14:
            break
    return h


def ibeta(a, b, x):
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    lb = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lb) * betacf(a, b, x) / a
    return 1 - math.exp(lb) * betacf(b, a, 1 - x) / b


def t_ppf975(df):
    # the 97.5% quantile of Student's t: bisection on its CDF
    lo, hi = 0.0, 50.0
    for _ in range(100):
        t = (lo + hi) / 2
        cdf = 1 - 0.5 * ibeta(df / 2, 0.5, df / (df + t * t))
        lo, hi = (t, hi) if cdf < 0.975 else (lo, t)
    return (lo + hi) / 2


def interval(xs):
    n = len(xs)
    if n == 0:
        return (float("nan"), float("nan"), 0)
    m = sum(xs) / n
    if n < 2:
        return (m, float("nan"), n)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    return (m, t_ppf975(n - 1) * sd / math.sqrt(n), n)


def fmt(e):
    m, h, n = e
    return f"{100*m:+.2f}% ± {100*h:.2f} (n={n})"



units = defaultdict(lambda: defaultdict(list))  # (arm, stat, split) -> (seed, task) -> values
fits = defaultdict(lambda: defaultdict(list))   # (arm, stat, split) -> (seed, task) -> public - private
seeds, scored = [], set()


def read(path, suffix):
    for line in open(path):
        r = json.loads(line)
        seed = str(r["seed"])
        seeds.append(seed)
        scored.add(r.get("scored_on") or "all")
        arm = r["arm"] + suffix
        for stat in ("delta_r", "headroom"):
            if r.get(stat) is not None:
                units[(arm, stat, r["split"])][(seed, r["task_id"])].append(float(r[stat]))
            pub = r.get(stat + "_public")
            if pub is not None and r.get(stat) is not None:
                fits[(arm, stat, r["split"])][(seed, r["task_id"])].append(float(pub) - float(r[stat]))


dirs = sys.argv[1:]
if not dirs:
    sys.exit("usage: pool.py docs/run17/seed-<S>...")
for d in dirs:
    found = 0
    for path, suffix in ((f"{d}/rows.jsonl", ""), (f"{d}/5m/rows.jsonl", "-5m")):
        try:
            read(path, suffix)
            found += 1
        except FileNotFoundError:
            print(f"note: {path} is not there; {d} counts without it")
    if not found:
        sys.exit(f"pool.py: {d} has neither rows.jsonl nor 5m/rows.jsonl; pass docs/run17/seed-<S> folders")
print("seeds:", " ".join(sorted(set(seeds))))
print("scored on:", ", ".join(sorted(scored)), "(private: the part of the hidden answers no agent saw a score of)")
present = {arm for (arm, _, _) in units}
arms = [a for a in ("initial", "expert", "policy", "sft", "sft+ppo", "sft-5m", "sft+ppo-5m") if a in present]
# The declared questions, in their order (docs/science/run17.md).
pairs = [("sft+ppo", "policy"), ("sft+ppo", "sft"), ("sft", "policy"), ("sft+ppo", "expert"), ("sft", "expert"),
         ("sft+ppo", "sft+ppo-5m"), ("sft", "sft-5m"), ("sft+ppo-5m", "sft-5m"), ("sft+ppo-5m", "expert")]
pairs = [(x, y) for x, y in pairs if x in present and y in present]


def mean(v):
    return sum(v) / len(v)


def paired(x, y, stat, split):
    """the paired x - y line over the (seed, task) units both have, and its per-seed means"""
    a, b = units[(x, stat, split)], units[(y, stat, split)]
    diffs = {k: mean(a[k]) - mean(b[k]) for k in a if k in b}
    wins = sum(1 for v in diffs.values() if v > 0)
    losses = sum(1 for v in diffs.values() if v < 0)
    print(f"  paired {x} - {y} {stat:9s} {fmt(interval(list(diffs.values())))}; units better {wins}, worse {losses}, equal {len(diffs)-wins-losses}")
    per_seed = defaultdict(list)
    for (s, t), v in diffs.items():
        per_seed[s].append(v)
    print("    per seed: " + ", ".join(f"{s} {100*mean(v):+.2f}%" for s, v in sorted(per_seed.items())))


for split in ("held-out", "held-in"):
    print(f"\n{split}")
    for stat in ("headroom", "delta_r"):
        for arm in arms:
            u = units[(arm, stat, split)]
            if u:
                print(f"  {arm:10s} {stat:9s} {fmt(interval([mean(v) for v in u.values()]))}")
        for x, y in pairs:
            paired(x, y, stat, split)

print("\npublic minus private (the part the agent was told minus the part reported), per (seed, task) unit")
for split in ("held-out", "held-in"):
    for stat in ("headroom", "delta_r"):
        for arm in arms:
            u = fits[(arm, stat, split)]
            if u:
                print(f"  {split} {arm:10s} {stat:9s} {fmt(interval([mean(v) for v in u.values()]))}")


def behaviour(path, names):
    """split -> (trajectories, steps, edit share, unchanged share, ran share, final share, unrun-change share) of a cell report."""
    out, split = {}, None
    for line in open(path):
        m = re.match(r"## (held-\w+) tasks", line)
        if m:
            split = m.group(1)
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if split and len(cells) in (9, 11) and cells[0] in names and cells[1].isdigit() and re.fullmatch(r"\d+%|-", cells[3]):
            pct = lambda c: float(c.rstrip("%")) / 100 if c != "-" else 0.0
            out[split] = (int(cells[1]), int(cells[2]), pct(cells[3]), pct(cells[4]), pct(cells[6]), pct(cells[7]), pct(cells[8]))
    return out


print("\nbehaviour (SmolLM2's cells): unchanged edits (of edits) / ran the script / Final Answer / ended on a change no run followed (of episodes)")
for split in ("held-out", "held-in"):
    for arm in ("policy", "sft", "sft+ppo"):
        per, tot = [], [0, 0, 0, 0, 0, 0]
        for d in dirs:
            f = sorted(glob.glob(f"{d}/cell-{'baselines' if arm == 'policy' else arm}-s*-report.md"))
            if not f:
                continue
            b = behaviour(f[0], (arm,)).get(split)
            if not b:
                continue
            n, steps, edit, unch, ran, fin, unrun = b
            per.append(f"{d.rstrip('/').split('-')[-1]} {100*unch:.0f}/{100*ran:.0f}/{100*fin:.0f}/{100*unrun:.0f}")
            edits = steps * edit
            tot = [tot[0] + n, tot[1] + edits, tot[2] + edits * unch, tot[3] + n * ran, tot[4] + n * fin, tot[5] + n * unrun]
        if tot[0]:
            print(f"  {split} {arm:8s} pooled {100*tot[2]/max(tot[1],1e-9):.0f}% / {100*tot[3]/tot[0]:.0f}% / {100*tot[4]/tot[0]:.0f}% / {100*tot[5]/tot[0]:.0f}%   per seed: {', '.join(per)}")

print("\nselection (held-in curve headroom at each curve point -> selected update)")
for d in dirs:
    for name, sub in (("smollm2", ""), ("5m", "/5m")):
        try:
            j = json.load(open(f"{d}{sub}/selection.json"))
        except OSError:
            continue
        pts = [j["sft_point"]] + j["points"]
        print(f"  {d.rstrip('/').split('-')[-1]} {name}: " + " / ".join(f"{p.get('update', '?')}: {100*p['held_in_headroom']:+.1f}%" for p in pts) + f" -> update {j['selected_update']}")
