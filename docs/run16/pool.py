#!/usr/bin/env python3
"""pool.py SEED_DIR...: run 16's questions over the seeds' committed rows.

run 13's pool.py (the same statistics, the same output lines), reading
each docs/run16/seed-<S>/rows.jsonl (`mlerl head --json` of the grid's
experiments dataset, schema 1.7: every score on the private part of the
hidden answers), and adding per arm and split the public minus private
difference (delta_r and headroom share on the public part, whose scores
the agent was told, minus the private part's), per (seed, task) unit
with its 95% interval.

Reads each docs/run16/seed-<S>/rows.jsonl (the grid's experiment rows) and
prints, per split, each arm's mean delta_r and share of the headroom
closed, and the paired SFT + PPO - SFT difference over (seed, task) units
(per unit: the mean over its trajectories), with 95% Student-t intervals:
the grid's own statistic (experiment/report.go pairedUnits), pooled over
the seeds given. Run on seed 41 alone it reproduces that seed's report.

With rows of the scripted expert (the rl preset's expert arm since issue
49; none in runs 13 and 15, whose output this leaves as it was), also
that arm's means and the paired SFT + PPO - expert and SFT - expert
differences, in the same form.

Also the behaviour tables of each seed's SFT and SFT + PPO cell reports
(unchanged edits as a share of edits, episodes that ran the script and
that ended with a Final Answer), per seed and pooled by counts, and the
held-out question split into the original fifteen's 5 held-out tasks and
the 16 new ones.
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


ORIGINAL_HELD_OUT = {"election-vote", "review-sentiment", "shapes-10x10", "social-communities-graph", "sunspots-yearly"}

units = defaultdict(lambda: defaultdict(list))  # (arm, stat, split) -> (seed, task) -> values
fits = defaultdict(lambda: defaultdict(list))   # (arm, stat, split) -> (seed, task) -> public - private
seeds, scored = [], set()
for d in sys.argv[1:]:
    for line in open(f"{d}/rows.jsonl"):
        r = json.loads(line)
        seed = str(r["seed"])
        seeds.append(seed)
        scored.add(r.get("scored_on") or "all")
        for stat in ("delta_r", "headroom"):
            if r.get(stat) is not None:
                units[(r["arm"], stat, r["split"])][(seed, r["task_id"])].append(float(r[stat]))
            pub = r.get(stat + "_public")
            if pub is not None and r.get(stat) is not None:
                fits[(r["arm"], stat, r["split"])][(seed, r["task_id"])].append(float(pub) - float(r[stat]))
print("seeds:", " ".join(sorted(set(seeds))))
print("scored on:", ", ".join(sorted(scored)), "(private: the part of the hidden answers no agent saw a score of)")
has_expert = any(arm == "expert" for (arm, _, _) in list(units))
arms = ("initial", "expert", "sft", "sft+ppo") if has_expert else ("initial", "sft", "sft+ppo")
pairs = [("sft+ppo", "sft")] + ([("sft+ppo", "expert"), ("sft", "expert")] if has_expert else [])


def paired(x, y, stat, split):
    """the paired x - y line over the (seed, task) units both have, and its per-seed means"""
    a, b = units[(x, stat, split)], units[(y, stat, split)]
    diffs = {k: sum(a[k])/len(a[k]) - sum(b[k])/len(b[k]) for k in a if k in b}
    wins = sum(1 for x in diffs.values() if x > 0)
    losses = sum(1 for x in diffs.values() if x < 0)
    print(f"  paired {x} - {y} {stat:9s} {fmt(interval(list(diffs.values())))}; units better {wins}, worse {losses}, equal {len(diffs)-wins-losses}")
    per_seed = defaultdict(list)
    for (s, t), d in diffs.items():
        per_seed[s].append(d)
    print("    per seed: " + ", ".join(f"{s} {100*sum(v)/len(v):+.2f}%" for s, v in sorted(per_seed.items())))


for split in ("held-out", "held-in"):
    print(f"\n{split}")
    for stat in ("delta_r", "headroom"):
        for arm in arms:
            u = units[(arm, stat, split)]
            print(f"  {arm:8s} {stat:9s} {fmt(interval([sum(v)/len(v) for v in u.values()]))}")
        for x, y in pairs:
            paired(x, y, stat, split)

print("\npublic minus private (the part the agent was told minus the part reported), per (seed, task) unit")
for split in ("held-out", "held-in"):
    for stat in ("delta_r", "headroom"):
        for arm in arms:
            u = fits[(arm, stat, split)]
            if u:
                print(f"  {split} {arm:8s} {stat:9s} {fmt(interval([sum(v)/len(v) for v in u.values()]))}")

print("\nheld-out, by task origin (paired sft+ppo - sft)")
for name, keep in (("original 5", lambda t: t in ORIGINAL_HELD_OUT), ("new 16", lambda t: t not in ORIGINAL_HELD_OUT)):
    for stat in ("delta_r", "headroom"):
        a, b = units[("sft+ppo", stat, "held-out")], units[("sft", stat, "held-out")]
        diffs = [sum(a[k])/len(a[k]) - sum(b[k])/len(b[k]) for k in a if k in b and keep(k[1])]
        print(f"  {name:10s} {stat:9s} {fmt(interval(diffs))}")


def behaviour(path):
    """split -> (trajectories, steps, edit share, unchanged share, ran share, final share) of a cell report."""
    out, split = {}, None
    for line in open(path):
        m = re.match(r"## (held-\w+) tasks", line)
        if m:
            split = m.group(1)
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        # the behaviour table: 8 columns, 9 since the unrun-change column
        if split and len(cells) in (8, 9) and cells[0] in ("sft", "sft+ppo") and cells[1].isdigit() and re.fullmatch(r"\d+%|-", cells[3]):
            pct = lambda c: float(c.rstrip("%")) / 100
            out[split] = (int(cells[1]), int(cells[2]), pct(cells[3]), pct(cells[4]), pct(cells[6]), pct(cells[7]))
    return out


print("\nbehaviour at the evaluated checkpoints: unchanged edits (of edits) / ran the script / Final Answer (of episodes)")
for split in ("held-out", "held-in"):
    for arm in ("sft", "sft+ppo"):
        per, tot = [], [0, 0, 0, 0, 0]
        for d in sys.argv[1:]:
            f = glob.glob(f"{d}/cell-{arm}-s*-report.md")
            if not f:
                continue
            b = behaviour(f[0]).get(split)
            if not b:
                continue
            n, steps, edit, unch, ran, fin = b
            per.append(f"{d.split('-')[-1]} {100*unch:.0f}/{100*ran:.0f}/{100*fin:.0f}")
            edits = steps * edit
            tot = [tot[0] + n, tot[1] + edits, tot[2] + edits * unch, tot[3] + n * ran, tot[4] + n * fin]
        if tot[0]:
            print(f"  {split} {arm:8s} pooled {100*tot[2]/max(tot[1],1e-9):.0f}% / {100*tot[3]/tot[0]:.0f}% / {100*tot[4]/tot[0]:.0f}%   per seed: {', '.join(per)}")

print("\nselection (held-in curve headroom at updates 0 / 20 / 40 -> selected)")
import json
for d in sys.argv[1:]:
    try:
        j = json.load(open(f"{d}/selection.json"))
    except OSError:
        continue
    pts = [j["sft_point"]] + j["points"]
    print(f"  {d.split('-')[-1]}: " + " / ".join(f"{100*p['held_in_headroom']:+.1f}%" for p in pts) + f" -> update {j['selected_update']}")
