#!/usr/bin/env python3
"""Deterministic generator of the built-in mlerl task suite's data.

    /usr/bin/python3 tasks/generate.py            # every task
    /usr/bin/python3 tasks/generate.py wine-cultivar digits-8x8

For each task it writes, under tasks/<id>/:
  workspace/*.csv     train/valid (labelled) and test (inputs only) data
  private/answers.csv the hidden test labels (column `id` + prediction columns)
  private/grade.py    the grader: tasks/grade_template.py with this task's
                      metric and columns filled in
  task.yaml           the task's metadata (from TASKS below)

  description.md      what the agent reads: the task, the files and their
                      columns, the metric and the submission format
It writes train.py only for the tasks whose metadata has a `script` (the
templates of gen_scripts.py); the original fifteen are hand-written. Everything is
seeded, so rerunning it reproduces the committed files byte for byte on the
same numpy/scikit-learn/statsmodels versions (Debian 12: numpy 1.24,
scikit-learn 1.2, statsmodels 0.13).

Sources: scikit-learn's bundled datasets (load_*), statsmodels' bundled
datasets (sm.datasets.*), and the synthetic generators below (text, graph,
image, multi-label), each documented in its function.
"""
import os
import re
import sys

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gen_common import SPLIT_RULE, TASKS, declared_splits, encode_pixels, series_split, split_idx, task, write_split  # noqa: E402
from gen_scripts import train_script  # noqa: E402

# ---------------------------------------------------------------- tabular


@task(
    "breast-cancer-diagnosis",
    title="Breast cancer diagnosis from cell-nucleus measurements",
    modality="tabular", task_type="binary-classification", metric="log_loss", direction="lower",
    pred_columns=["malignant"], split="held-in",
)
def breast_cancer():
    """sklearn.datasets.load_breast_cancer (Wisconsin diagnostic, 569 rows, 30
    features); target malignant = 1 for malignant tumours. Stratified 60/20/20."""
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer(as_frame=True)
    df = d.data.copy()
    df.columns = [re.sub(r"[^a-z0-9]+", "_", c.lower()).strip("_") for c in df.columns]
    df["malignant"] = (d.target == 0).astype(int)
    return write_split(df, ["malignant"], split_idx(len(df), 1, stratify=df["malignant"]))


@task(
    "wine-cultivar",
    title="Wine cultivar from chemical analysis",
    modality="tabular", task_type="multiclass-classification", metric="accuracy", direction="higher",
    pred_columns=["cultivar"], split="held-in",
)
def wine():
    """sklearn.datasets.load_wine (178 wines, 13 features, 3 cultivars). Stratified 50/25/25."""
    from sklearn.datasets import load_wine

    d = load_wine(as_frame=True)
    df = d.data.copy()
    df.columns = [re.sub(r"[^a-z0-9]+", "_", c.lower()).strip("_") for c in df.columns]
    df["cultivar"] = d.target
    return write_split(df, ["cultivar"], split_idx(len(df), 2, (0.5, 0.25), stratify=df["cultivar"]))


@task(
    "diabetes-progression",
    title="Diabetes progression one year after baseline",
    modality="tabular", task_type="regression", metric="rmse", direction="lower",
    pred_columns=["progression"], split="held-in",
)
def diabetes():
    """sklearn.datasets.load_diabetes(scaled=False) (442 patients, 10 raw
    features); target: disease progression one year later. 60/20/20."""
    from sklearn.datasets import load_diabetes

    d = load_diabetes(as_frame=True, scaled=False)
    df = d.data.copy()
    df["progression"] = d.target
    return write_split(df, ["progression"], split_idx(len(df), 3))


@task(
    "affairs-survey",
    title="Extramarital affairs from a 1974 survey of women",
    modality="tabular", task_type="binary-classification", metric="roc_auc", direction="higher",
    pred_columns=["had_affair"], split="held-in",
)
def affairs():
    """statsmodels.datasets.fair (Fair 1978, 6,366 women, 8 features); target
    had_affair = 1 if time spent in affairs > 0 (the `affairs` column itself is
    dropped). A seeded random 3,000 rows are kept (data size). 50/20/30."""
    import statsmodels.api as sm

    df = sm.datasets.fair.load_pandas().data
    df = df.sample(n=3000, random_state=4).reset_index(drop=True)
    df["had_affair"] = (df.pop("affairs") > 0).astype(int)
    for c in df.columns:
        if c not in ("age", "yrs_married", "children"):
            df[c] = df[c].astype(int)
    return write_split(df, ["had_affair"], split_idx(len(df), 4, (0.5, 0.2)))


@task(
    "election-vote",
    title="1996 US presidential vote from the ANES survey",
    modality="tabular", task_type="binary-classification", metric="accuracy", direction="higher",
    pred_columns=["vote"], split="held-out",
)
def anes():
    """statsmodels.datasets.anes96 (944 respondents, 1996 American National
    Election Study); target vote: 1 = Dole, 0 = Clinton. The derived
    logpopul column is dropped. 50/20/30."""
    import statsmodels.api as sm

    df = sm.datasets.anes96.load_pandas().data.drop(columns=["logpopul"])
    df = df.astype({c: int for c in df.columns if c != "popul"})
    return write_split(df, ["vote"], split_idx(len(df), 5, (0.5, 0.2)))


@task(
    "health-visits",
    title="Number of doctor visits in the RAND Health Insurance Experiment",
    modality="tabular", task_type="regression", metric="mae", direction="lower",
    pred_columns=["visits"], split="held-in",
)
def randhie():
    """statsmodels.datasets.randhie (RAND HIE, 20,190 person-years); target
    visits = mdvis (outpatient doctor visits in the year). A seeded random
    4,000 rows are kept. 50/20/30."""
    import statsmodels.api as sm

    df = sm.datasets.randhie.load_pandas().data
    df = df.sample(n=4000, random_state=6).reset_index(drop=True)
    df["visits"] = df.pop("mdvis").astype(int)
    for c in df.columns:
        if df[c].dtype.kind == "f":
            df[c] = df[c].round(4)
    return write_split(df, ["visits"], split_idx(len(df), 6, (0.5, 0.2)))


@task(
    "scene-tags",
    title="Multi-label tagging of scene descriptors",
    modality="tabular", task_type="multilabel-classification", metric="f1_macro", direction="higher",
    pred_columns=[f"tag_{k}" for k in range(6)], split="held-in",
)
def scene_tags():
    """Synthetic multi-label data: sklearn.datasets.make_multilabel_classification
    (1,500 samples, 40 count features, 6 tags, about 2 tags per sample,
    random_state=7), i.e. each sample's features are word counts drawn from a
    mixture of its tags' multinomials. 50/20/30."""
    from sklearn.datasets import make_multilabel_classification

    X, Y = make_multilabel_classification(
        n_samples=1500, n_features=40, n_classes=6, n_labels=2, length=60, allow_unlabeled=False, random_state=7
    )
    df = pd.DataFrame(X.astype(int), columns=[f"f{k}" for k in range(40)])
    tags = [f"tag_{k}" for k in range(6)]
    for k, t in enumerate(tags):
        df[t] = Y[:, k]
    return write_split(df, tags, split_idx(len(df), 7, (0.5, 0.2)))


# ---------------------------------------------------------------- image



@task(
    "digits-8x8",
    title="Handwritten digit recognition from 8x8 images",
    modality="image", task_type="multiclass-classification", metric="accuracy", direction="higher",
    pred_columns=["digit"], split="held-in",
)
def digits():
    """sklearn.datasets.load_digits (1,797 8x8 images, intensities 0..16).
    Each image is one `pixels` string of 64 base-17 characters. Stratified 50/20/30."""
    from sklearn.datasets import load_digits

    d = load_digits()
    df = pd.DataFrame({"pixels": [encode_pixels(r) for r in d.data], "digit": d.target})
    return write_split(df, ["digit"], split_idx(len(df), 8, (0.5, 0.2), stratify=df["digit"]))


@task(
    "shapes-10x10",
    title="Noisy geometric shape recognition from 10x10 images",
    modality="image", task_type="multiclass-classification", metric="accuracy", direction="higher",
    pred_columns=["shape"], split="held-out",
)
def shapes():
    """Synthetic 10x10 images of 6 shapes (hbar, vbar, square, cross, diagonal,
    disc) with random size, position and stroke intensity, 12% salt-and-pepper
    noise pixels 1,500 images, seed 9, intensities
    0..16 as in digits-8x8; the flipped diagonal is the anti-diagonal. Stratified 50/20/30."""
    rng = np.random.RandomState(9)
    side = 10
    names = ["hbar", "vbar", "square", "cross", "diagonal", "disc"]
    rows = []
    yy, xx = np.mgrid[0:side, 0:side]
    for k in range(1500):
        c = k % len(names)
        img = np.zeros((side, side))
        s = rng.randint(4, 8)  # size
        r0, c0 = rng.randint(0, side - s + 1), rng.randint(0, side - s + 1)
        v = rng.randint(8, 17)
        name = names[c]
        if name == "hbar":
            r = r0 + rng.randint(0, s)
            img[r, c0:c0 + s] = v
            if rng.rand() < 0.5 and r + 1 < side:
                img[r + 1, c0:c0 + s] = v
        elif name == "vbar":
            cc = c0 + rng.randint(0, s)
            img[r0:r0 + s, cc] = v
            if rng.rand() < 0.5 and cc + 1 < side:
                img[r0:r0 + s, cc + 1] = v
        elif name == "square":
            img[r0, c0:c0 + s] = v
            img[r0 + s - 1, c0:c0 + s] = v
            img[r0:r0 + s, c0] = v
            img[r0:r0 + s, c0 + s - 1] = v
        elif name == "cross":
            m = s // 2
            img[r0 + m, c0:c0 + s] = v
            img[r0:r0 + s, c0 + m] = v
        elif name == "diagonal":
            for j in range(s):
                img[r0 + j, c0 + j] = v
            if rng.rand() < 0.5:
                img = img[:, ::-1]
        else:  # disc
            cy, cx = r0 + (s - 1) / 2, c0 + (s - 1) / 2
            img[(yy - cy) ** 2 + (xx - cx) ** 2 <= (s / 2) ** 2] = v
        noise = rng.rand(side, side) < 0.12
        img[noise] = rng.randint(0, 17, size=noise.sum())
        rows.append((encode_pixels(img.ravel()), name))
    perm = rng.permutation(len(rows))
    df = pd.DataFrame([rows[i] for i in perm], columns=["pixels", "shape"])
    return write_split(df, ["shape"], split_idx(len(df), 9, (0.5, 0.2), stratify=df["shape"]))


# ---------------------------------------------------------------- time series


@task(
    "co2-weekly",
    title="Forecast weekly atmospheric CO2 at Mauna Loa",
    modality="time-series", task_type="forecasting", metric="mae", direction="lower",
    pred_columns=["co2"], split="held-in",
)
def co2():
    """statsmodels.datasets.co2 (weekly CO2 ppm at Mauna Loa, 1958-03 to 2001-12,
    2,284 weeks, 59 missing). t = weeks since the first observation. The last
    156 weeks (3 years) are the test horizon, the 104 weeks before them validation."""
    import statsmodels.api as sm

    d = sm.datasets.co2.load_pandas().data
    df = pd.DataFrame({"date": d.index.strftime("%Y-%m-%d"), "t": range(len(d)), "co2": d["co2"].values})
    return series_split(df, "co2", 104, 156)


@task(
    "sunspots-yearly",
    title="Forecast yearly sunspot activity",
    modality="time-series", task_type="forecasting", metric="rmse", direction="lower",
    pred_columns=["sunactivity"], split="held-out",
)
def sunspots():
    """statsmodels.datasets.sunspots (yearly Wolf sunspot numbers 1700-2008, 309
    years). t = years since 1700. The last 30 years are the test horizon, the
    30 before them validation."""
    import statsmodels.api as sm

    d = sm.datasets.sunspots.load_pandas().data
    df = pd.DataFrame({"year": d["YEAR"].astype(int), "t": range(len(d)), "sunactivity": d["SUNACTIVITY"]})
    return series_split(df, "sunactivity", 30, 30)


# ---------------------------------------------------------------- text

TICKET_TOPICS = {
    "billing": ["invoice", "charged", "payment", "credit card", "refund", "subscription fee", "bank", "receipt",
                "double charge", "price", "billing address", "discount code"],
    "shipping": ["package", "delivery", "courier", "tracking number", "arrived", "shipped", "warehouse",
                 "delivery address", "late", "lost parcel", "shipping label", "customs"],
    "technical": ["app", "crash", "error message", "login page", "update", "bug", "screen", "freezes",
                  "not loading", "browser", "sync", "password reset email"],
    "account": ["account", "username", "password", "email address", "profile", "two factor", "locked out",
                "delete my account", "privacy settings", "sign in", "verification", "notifications"],
    "returns": ["return", "exchange", "damaged", "wrong size", "refund", "return label", "broken", "replacement",
                "defective", "store credit", "return window", "original packaging"],
}
SHARED = ["order", "customer service", "help", "today", "issue", "problem", "week", "again", "please",
          "urgent", "thanks", "yesterday", "website", "support", "email", "phone"]
TEMPLATES = [
    "hi, i have a problem with the {a} and the {b}.",
    "my {a} is still an issue, {s}.",
    "can you help me with the {a}? the {b} is wrong.",
    "{s}. i contacted you about the {a} {s2}.",
    "the {a} and {b} again, this is the third time.",
    "i need help: {a}, {b}, {c}.",
    "why is the {a} not fixed yet? {s}.",
    "regarding my {s2} {a}, nothing happened with the {b}.",
]


def ticket(rng, topic, confuse):
    """One synthetic support ticket: keywords mostly from its topic, some from a
    confusing other topic, shared filler words, random templates."""
    words = []
    for _ in range(3):
        t = topic if rng.rand() > confuse else rng.choice(sorted(TICKET_TOPICS))
        words.append(rng.choice(TICKET_TOPICS[t]))
    tpl = TEMPLATES[rng.randint(len(TEMPLATES))]
    return tpl.format(a=words[0], b=words[1], c=words[2], s=rng.choice(SHARED), s2=rng.choice(SHARED))


@task(
    "support-tickets",
    title="Route customer support tickets to the right team",
    modality="text", task_type="multiclass-classification", metric="f1_macro", direction="higher",
    pred_columns=["team"], split="held-in",
)
def support_tickets():
    """Synthetic support tickets (seed 10): 2,000 tickets over 5 teams with
    unequal frequencies (35/25/20/12/8%); each ticket fills a template with 3
    keywords drawn from its team's vocabulary, or with probability 0.35 from a
    random team's, plus shared filler; 4% of labels are flipped at random."""
    rng = np.random.RandomState(10)
    teams = ["billing", "shipping", "technical", "account", "returns"]
    probs = [0.35, 0.25, 0.2, 0.12, 0.08]
    rows = []
    for _ in range(2000):
        t = teams[rng.choice(5, p=probs)]
        text = ticket(rng, t, 0.35)
        if rng.rand() < 0.04:
            t = teams[rng.randint(5)]
        rows.append((text, t))
    df = pd.DataFrame(rows, columns=["text", "team"])
    return write_split(df, ["team"], split_idx(len(df), 10, (0.5, 0.2)))


POS = ["great", "excellent", "good", "amazing", "reliable", "comfortable", "fast", "sturdy", "beautiful", "worth it"]
NEG = ["terrible", "awful", "bad", "cheap", "flimsy", "slow", "disappointing", "noisy", "useless", "overpriced"]
PRODUCTS = ["headphones", "blender", "backpack", "lamp", "keyboard", "kettle", "jacket", "charger", "chair", "phone case"]
FILLER = ["i bought this last month", "arrived on time", "my second one", "used it every day", "gift for my brother",
          "the color is as pictured", "came in a box", "ordered online", "for the office", "after two weeks"]


@task(
    "review-sentiment",
    title="Sentiment of product reviews",
    modality="text", task_type="binary-classification", metric="roc_auc", direction="higher",
    pred_columns=["positive"], split="held-out",
)
def reviews():
    """Synthetic product reviews (seed 11): 2,400 reviews of 2-4 clauses; each
    clause uses a positive or negative adjective, negated ("not good") with
    probability 0.35, which flips its polarity, and optional intensifiers;
    filler clauses carry no sentiment. The label is the sign of the summed
    clause polarities plus Gaussian noise (sd 0.8)."""
    rng = np.random.RandomState(11)
    rows = []
    for _ in range(2400):
        prod = rng.choice(PRODUCTS)
        score = 0.0
        clauses = []
        for _ in range(rng.randint(2, 5)):
            if rng.rand() < 0.3:
                clauses.append(rng.choice(FILLER))
                continue
            pos = rng.rand() < 0.5
            adj = rng.choice(POS if pos else NEG)
            pol = 1.0 if pos else -1.0
            neg = rng.rand() < 0.35
            if neg:
                pol = -pol
            inten = rng.rand() < 0.3
            if inten:
                pol *= 1.5
            score += pol
            subject = rng.choice(["the " + prod + " is", "it is", "quality is", "the build is", "honestly it was"])
            clauses.append(subject + (" not" if neg else "") + (" really" if inten else "") + " " + adj)
        label = int(score + rng.normal(0, 0.8) > 0)
        rows.append((", ".join(clauses) + ".", label))
    df = pd.DataFrame(rows, columns=["text", "positive"])
    return write_split(df, ["positive"], split_idx(len(df), 11, (0.5, 0.2)))


# ---------------------------------------------------------------- graph


def sbm_graph(seed, n, n_classes, n_feat, deg_in, deg_out, feat_signal, class_probs=None):
    """Stochastic block model with bag-of-words node features: each node has a
    class; edges form independently with expected within-class degree deg_in
    and between-class degree deg_out; each of n_feat binary features is on with
    probability 0.08 plus feat_signal for the class's 'own' features
    (n_feat / n_classes per class), so features alone are weakly informative
    and neighbours' features and labels carry most of the signal."""
    rng = np.random.RandomState(seed)
    y = rng.choice(n_classes, size=n, p=class_probs)
    same = y[:, None] == y[None, :]
    sizes = np.bincount(y, minlength=n_classes)
    p_in = deg_in / np.maximum(sizes[y] - 1, 1)
    p_out = deg_out / np.maximum(n - sizes[y], 1)
    p = np.where(same, p_in[:, None], p_out[:, None])
    upper = np.triu(rng.rand(n, n) < p, 1)
    src, dst = np.nonzero(upper)
    own = np.arange(n_feat) % n_classes
    prob = 0.08 + feat_signal * (own[None, :] == y[:, None])
    F = (rng.rand(n, n_feat) < prob).astype(int)
    nodes = pd.DataFrame(F, columns=[f"w{k}" for k in range(n_feat)])
    nodes.insert(0, "id", range(n))
    edges = pd.DataFrame({"src": src, "dst": dst})
    return nodes, edges, y


def graph_task(nodes, edges, labels, seed, fracs):
    tr, va, te = split_idx(len(nodes), seed, fracs)
    lab = pd.DataFrame({"id": nodes["id"], "label": labels})
    extra = {"nodes.csv": nodes, "edges.csv": edges}
    return lab.iloc[tr], lab.iloc[va], lab.iloc[te][["id"]], lab.iloc[te], extra


@task(
    "paper-topics-graph",
    title="Topic of papers in a citation graph",
    modality="graph", task_type="multiclass-classification", metric="accuracy", direction="higher",
    pred_columns=["label"], split="held-in",
)
def paper_graph():
    """Synthetic citation graph (seed 12): a stochastic block model with 1,500
    papers in 6 topics, expected within-topic degree 4 and cross-topic degree
    1.5, 36 binary word features with class signal 0.18 (see sbm_graph).
    Node split 30/20/50 (semi-supervised style)."""
    nodes, edges, y = sbm_graph(12, 1500, 6, 36, 4.0, 1.5, 0.18)
    return graph_task(nodes, edges, y, 12, (0.3, 0.2))


@task(
    "social-communities-graph",
    title="Community membership of users in a social graph",
    modality="graph", task_type="multiclass-classification", metric="f1_macro", direction="higher",
    pred_columns=["label"], split="held-out",
)
def social_graph():
    """Synthetic social graph (seed 13): a stochastic block model with 1,200
    users in 4 communities of unequal size (40/30/20/10%), expected
    within-community degree 5 and cross-community degree 2.5, 24 binary
    interest features with class signal 0.15 (see sbm_graph). Node split 30/20/50."""
    nodes, edges, y = sbm_graph(13, 1200, 4, 24, 5.0, 2.5, 0.15, class_probs=[0.4, 0.3, 0.2, 0.1])
    return graph_task(nodes, edges, y, 13, (0.3, 0.2))


# ---------------------------------------------------------------- writing


def yaml_scalar(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return repr(v)
    s = str(v)
    if re.fullmatch(r"[A-Za-z0-9_.\-/ ()]+", s) and not re.fullmatch(r"[0-9.eE+\-]+", s):
        return s
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_task(meta):
    root = os.path.join(HERE, meta["id"])
    ws, priv = os.path.join(root, "workspace"), os.path.join(root, "private")
    os.makedirs(ws, exist_ok=True)
    os.makedirs(priv, exist_ok=True)
    out = meta["fn"]()
    train, valid, test, answers = out[:4]
    extra = out[4] if len(out) > 4 else {}
    files = [("train.csv", train), ("valid.csv", valid), ("test.csv", test)] + list(extra.items())
    for name, df in files:
        df.to_csv(os.path.join(ws, name), index=False, float_format="%.6g")
    with open(os.path.join(root, "description.md"), "w") as f:
        f.write(describe(meta, files))
    answers.to_csv(os.path.join(priv, "answers.csv"), index=False, float_format="%.6g")
    with open(os.path.join(HERE, "grade_template.py")) as f:
        tpl = f.read()
    settings = 'METRIC = %r\nID_COLUMN = "id"\nPRED_COLUMNS = %r\n' % (meta["metric"], meta["pred_columns"])
    tpl = re.sub(r"(# === grader settings ===\n).*?(# === end grader settings ===)",
                 lambda m: m.group(1) + settings + m.group(2), tpl, flags=re.S)
    with open(os.path.join(priv, "grade.py"), "w") as f:
        f.write(tpl)
    script = train_script(meta)
    if script is not None:
        with open(os.path.join(ws, "train.py"), "w") as f:
            f.write(script)
    # task.yaml: keep hand-maintained m_best fields if present.
    ypath = os.path.join(root, "task.yaml")
    keep = {}
    if os.path.exists(ypath):
        for line in open(ypath):
            m = re.match(r"(m_best|m_best_source|m_best_public|m_best_private|time_limit_s): *(.*)", line.strip())
            if m:
                keep[m.group(1)] = m.group(2)
    lines = [
        "id: " + meta["id"],
        "title: " + yaml_scalar(meta["title"]),
        "modality: " + meta["modality"],
        "task_type: " + meta["task_type"],
        "metric: " + meta["metric"],
        "direction: " + meta["direction"],
        "m_best: " + keep.get("m_best", "0"),
        "m_best_source: " + keep.get("m_best_source", '"not measured yet"'),
        "time_limit_s: " + keep.get("time_limit_s", str(meta.get("time_limit_s", 60))),
        "split: " + (declared_splits()[meta["id"]] if meta["split"] == "rule" else meta["split"]),
    ]
    if meta["split"] == "rule":
        lines.append("split_rule: " + SPLIT_RULE)
    # The hidden answers' public and private parts: the rule and seed that
    # internal/tasks (split.go) computes private/parts.csv with (written by
    # `MLERL_PARTS_WRITE=1 go test -run TestSuiteParts ./internal/tasks`),
    # and m_best measured on each part (TestMeasureHeadroom).
    if meta["task_type"] == "forecasting":
        lines.append("answer_split: time-v1")
    else:
        lines += ["answer_split: strata-hash-v1", "answer_split_seed: mlerl-answers-v1"]
    for k in ("m_best_public", "m_best_private"):
        if k in keep:
            lines.append(k + ": " + keep[k])
    with open(ypath, "w") as f:
        f.write("\n".join(lines) + "\n")
    return len(train), len(valid), len(test)


ABOUT = {
    "breast-cancer-diagnosis": "Each row describes the cell nuclei in a digitised image of a fine-needle aspirate of a breast mass "
    "(Wisconsin Diagnostic Breast Cancer data): mean, standard error and worst value of 10 measurements such as radius, "
    "texture and concavity. Predict the probability that the tumour is malignant.",
    "wine-cultivar": "Each row is the chemical analysis of a wine grown in one region of Italy by one of three cultivators "
    "(13 measurements such as alcohol, flavanoids and proline). Predict the cultivar (0, 1 or 2).",
    "diabetes-progression": "Each row is a diabetes patient: age, sex, body-mass index, average blood pressure and six blood "
    "serum measurements (s1..s6), unscaled. Predict the quantitative measure of disease progression one year after baseline.",
    "affairs-survey": "Each row is a respondent of a 1974 Redbook magazine survey of married women: marriage rating, age, "
    "years married, children, religiousness, education and the occupations of the woman and her husband (coded 1-6). "
    "Predict the probability that she reported spending any time in extramarital affairs.",
    "election-vote": "Each row is a respondent of the 1996 American National Election Study: population of their place, "
    "days per week watching TV news, their own left-right self-placement (selfLR) and their placement of Clinton (ClinLR) "
    "and Dole (DoleLR) on a 1-7 scale, party identification (PID, 0 strong Democrat .. 6 strong Republican), age, "
    "education and income categories. Predict their vote: 1 = Dole, 0 = Clinton.",
    "health-visits": "Each row is a person-year of the RAND Health Insurance Experiment: log coinsurance rate, individual "
    "deductible plan indicator, log annual participation incentive, log of the maximum expenditure, physical limitation, "
    "number of chronic diseases and self-rated health indicators. Predict the number of outpatient doctor visits in the year.",
    "scene-tags": "Each row is a scene described by 40 count features (how often each of 40 descriptor words occurs); each "
    "scene carries one or more of 6 tags. Predict, for every test scene, which tags apply (0 or 1 per tag).",
    "digits-8x8": "Each row is an 8x8 grey-scale image of a handwritten digit, given as one `pixels` string of 64 characters "
    "(row-major); each character is an intensity 0..16 written in base 17 (0-9 then a-g). Predict the digit 0-9.",
    "shapes-10x10": "Each row is a noisy 10x10 grey-scale image of one geometric shape (hbar, vbar, square, cross, diagonal, "
    "disc) of random size, position and intensity, with salt-and-pepper noise; the `pixels` string has 100 characters, "
    "row-major, each an intensity 0..16 in base 17 (0-9 then a-g). Predict the shape name.",
    "co2-weekly": "Weekly atmospheric CO2 concentration (ppm) at Mauna Loa since March 1958; `t` counts weeks from the first "
    "observation and some training weeks are missing (empty co2). Validation covers the 2 years after the training "
    "history; the test rows are the 3 years after validation. Forecast co2 for every test week.",
    "sunspots-yearly": "Yearly mean sunspot numbers since 1700; `t` counts years from 1700. Validation covers the 30 years "
    "after the training history; the test rows are the 30 years after validation. Forecast the sunspot activity of every "
    "test year.",
    "support-tickets": "Each row is a short customer-support ticket written by a customer. Route it to the team that must "
    "handle it: billing, shipping, technical, account or returns. Teams are of unequal size and the vocabularies overlap.",
    "review-sentiment": "Each row is a short product review. Predict the probability that the review is positive; "
    "beware of negations and intensifiers.",
    "paper-topics-graph": "A citation graph of 1,500 papers: `nodes.csv` gives each paper's 36 binary word-presence features "
    "(w0..w35), `edges.csv` the undirected citation links (src, dst are node ids = row numbers of nodes.csv). "
    "train.csv and valid.csv give the topic (0-5) of some papers; predict the topic of the papers in test.csv.",
    "social-communities-graph": "A social network of 1,200 users: `nodes.csv` gives each user's 24 binary interest "
    "features (w0..w23), `edges.csv` the undirected friendships (src, dst are node ids = row numbers of nodes.csv). "
    "train.csv and valid.csv give the community (0-3, of unequal size) of some users; predict the community of the users "
    "in test.csv.",
}

METRIC_TEXT = {
    "accuracy": "accuracy (fraction of test rows predicted exactly), higher is better",
    "roc_auc": "ROC AUC of the predicted probabilities, higher is better",
    "log_loss": "binary log loss (cross-entropy) of the predicted probabilities, lower is better",
    "rmse": "root mean squared error, lower is better",
    "mae": "mean absolute error, lower is better",
    "f1_macro": "macro-averaged F1 (the mean of per-class F1 scores; for multi-label tasks, of per-tag F1), higher is better",
}


def describe(meta, files):
    cols = ", ".join("`%s`" % c for c in ["id"] + meta["pred_columns"])
    kind = {
        "roc_auc": "the predicted probability of class 1",
        "log_loss": "the predicted probability of class 1 (in [0, 1])",
        "rmse": "the predicted value",
        "mae": "the predicted value",
    }.get(meta["metric"], "the predicted label")
    if meta["task_type"] == "multilabel-classification":
        kind = "0 or 1 per tag"
    lines = [
        "# " + meta["title"],
        "",
        meta.get("about") or ABOUT[meta["id"]],
        "",
        "## Files (in the working directory)",
        "",
    ]
    for name, df in files:
        lines.append("- `%s`: %d rows; columns %s" % (name, len(df), ", ".join("`%s`" % c for c in df.columns)))
    lines += [
        "- `train.py`: a simple baseline. It loads the data, builds a model, trains it, prints the validation metric on "
        "one line `VAL_METRIC %s <value>` and writes `submission.csv`." % meta["metric"],
        "",
        "## Goal",
        "",
        "Metric: %s. Improve the test score; the validation split is labelled so that you can measure progress "
        "(the hidden test labels decide the reward)." % METRIC_TEXT[meta["metric"]],
        "",
        "## Submission",
        "",
        "`submission.csv` with columns %s: one row per row of `test.csv`, %s." % (cols, kind),
        "",
        "## train.py layout",
        "",
        "The script is divided into sections, each between a `# === <name> ===` line and a `# === end <name> ===` line: "
        "`imports`, `data` (loading, preprocessing, features; it defines `X_train, y_train, X_valid, y_valid, X_test, "
        "test_ids`), `model` (builds `model`), `training` (fits `model`; may set `final_model` for the test predictions) "
        "and `evaluate` (prints the metric and writes the submission). Keep the `VAL_METRIC` line and the submission format.",
        "",
    ]
    return "\n".join(lines)


# The tasks of the other generator modules register themselves on import.
import gen_tabular  # noqa: E402,F401
import gen_modalities  # noqa: E402,F401


def main(argv):
    """generate.py [--skip-unavailable] [ids...]: with --skip-unavailable, a
    task whose source tools are missing (Rscript, an R package, the fortune
    or word-list packages) is reported as `skipped <id>: <why>` and the
    others are still written (the regeneration test's mode)."""
    args = argv[1:]
    skip = "--skip-unavailable" in args
    args = [a for a in args if a != "--skip-unavailable"]
    ids = args or list(TASKS)
    for i in ids:
        if i not in TASKS:
            sys.exit("unknown task %r; known: %s" % (i, ", ".join(TASKS)))
        try:
            n = write_task(TASKS[i])
        except SystemExit as e:
            if skip and "apt-get install" in str(e):
                print("skipped %s: %s" % (i, e))
                continue
            raise
        print("%-28s train %5d  valid %5d  test %5d" % ((i,) + n))


if __name__ == "__main__":
    main(sys.argv)
