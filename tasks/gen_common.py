"""Shared helpers of the task generators: the task registry and the splits.

generate.py defines the original fifteen tasks; gen_tabular.py and
gen_modalities.py add the tasks read from Debian's R packages (and other
registry packages). Each module registers its tasks with @task; generate.py
imports them all and writes whichever are asked for.
"""
import hashlib
import io
import os
import subprocess

import numpy as np
import pandas as pd

# Task metadata. m_best values were measured with tasks/measure.py's
# "strong" solutions (see tasks/README.md); time limits are per execution.
TASKS = {}


def task(id, **meta):
    def deco(fn):
        TASKS[id] = dict(meta, id=id, fn=fn)
        return fn

    return deco


# The declared split of the tasks added with the larger suite (tasks whose
# metadata says split="rule"; the fifteen original tasks keep theirs). It is
# fixed before any result on them is read (tasks/README.md): the rule tasks
# are grouped by (modality, task_type); within a group they are ordered by
# sha256(SPLIT_SALT + id) and the first floor((n + 1) / 3) are held-out, the
# rest held-in. A group of one stays held-in, so every held-out modality and
# task type also occurs held-in. internal/catalog's TestDeclaredSplit checks
# every task.yaml against this rule.
SPLIT_RULE = "sha256-strata-v1"  # written as split_rule in task.yaml
SPLIT_SALT = "mlerl-suite-split-v1/"


def declared_splits():
    """{task id: "held-in" | "held-out"} for every task with split="rule"."""
    groups = {}
    for m in TASKS.values():
        if m["split"] == "rule":
            groups.setdefault((m["modality"], m["task_type"]), []).append(m["id"])
    out = {}
    for ids in groups.values():
        ids = sorted(ids, key=lambda i: hashlib.sha256((SPLIT_SALT + i).encode()).hexdigest())
        k = (len(ids) + 1) // 3
        for j, i in enumerate(ids):
            out[i] = "held-out" if j < k else "held-in"
    return out


def split_idx(n, seed, fracs=(0.6, 0.2), stratify=None):
    """Shuffled train/valid/test index arrays (stratified when labels given)."""
    rng = np.random.RandomState(seed)
    if stratify is None:
        perm = rng.permutation(n)
        a, b = int(n * fracs[0]), int(n * (fracs[0] + fracs[1]))
        return np.sort(perm[:a]), np.sort(perm[a:b]), np.sort(perm[b:])
    tr, va, te = [], [], []
    for cls in sorted(set(stratify)):
        idx = rng.permutation(np.flatnonzero(np.asarray(stratify) == cls))
        a, b = int(round(len(idx) * fracs[0])), int(round(len(idx) * (fracs[0] + fracs[1])))
        tr += list(idx[:a])
        va += list(idx[a:b])
        te += list(idx[b:])
    return np.sort(tr), np.sort(va), np.sort(te)


def write_split(df, target_cols, idx, id_prefix=""):
    """Returns train, valid, test (no targets), answers frames with an id column."""
    df = df.reset_index(drop=True).copy()
    df.insert(0, "id", [f"{id_prefix}{k}" if id_prefix else k for k in range(len(df))])
    tr, va, te = (df.iloc[i].reset_index(drop=True) for i in idx)
    answers = te[["id"] + target_cols]
    test = te.drop(columns=target_cols)
    return tr, va, test, answers


def series_split(df, target, n_valid, n_test):
    """Chronological split: the last n_test rows are the test horizon, the
    n_valid before them validation. Test and valid rows whose target is
    missing are dropped (they cannot be scored); train keeps them (NaN)."""
    df = df.reset_index(drop=True).copy()
    df.insert(0, "id", range(len(df)))
    n = len(df)
    tr = df.iloc[: n - n_valid - n_test]
    va = df.iloc[n - n_valid - n_test : n - n_test].dropna(subset=[target])
    te = df.iloc[n - n_test :].dropna(subset=[target])
    return tr, va, te.drop(columns=[target]), te[["id", target]]


B17 = "0123456789abcdefg"


def encode_pixels(img):
    """One character per pixel, row-major, intensity 0..16 in base 17."""
    return "".join(B17[int(v)] for v in img)



def r_dataset(package, name):
    """A data set shipped by an R package (Debian's r-cran-* or r-base-core's
    `datasets`), read through Rscript as a pandas DataFrame: data frames as
    they are (row names in column `rownames`), time series as columns
    `time` and `value` (one column per series for a multivariate one).
    Factors arrive as strings, R's NA as NaN. Rscript must be on PATH:
    regeneration needs `apt-get install r-base-core r-cran-<package>`;
    nothing else in mlerl does."""
    script = (
        "suppressMessages(data(list = %r, package = %r, envir = environment()));"
        "x <- get(%r);"
        "if (is.ts(x)) { x <- data.frame(time = as.numeric(time(x)), x, check.names = TRUE);"
        "  if (ncol(x) == 2) names(x)[2] <- 'value' } else "
        "{ x <- as.data.frame(x); x <- cbind(rownames = rownames(x), x) };"
        "write.csv(x, stdout(), row.names = FALSE, na = 'NA')" % (name, package, name)
    )
    try:
        out = subprocess.run(["Rscript", "--vanilla", "-e", script], check=True, capture_output=True)
    except FileNotFoundError:
        raise SystemExit("Rscript not found: regenerating R-package tasks needs `apt-get install r-base-core r-cran-%s`" % package)
    except subprocess.CalledProcessError as e:
        pkg = "r-base-core" if package == "datasets" else "r-cran-" + package.lower()
        raise SystemExit("Rscript could not read %s::%s (regenerating it needs `apt-get install %s`): %s"
                         % (package, name, pkg, e.stderr.decode(errors="replace").strip()))
    return pd.read_csv(io.StringIO(out.stdout.decode()), keep_default_na=False, na_values=["NA"])
