"""Initial train.py scripts of the tasks read from registry packages.

The fifteen original tasks have hand-written scripts; the tasks added with
the larger suite get theirs from the templates below, one per kind of task
(tabular, text, time series, multi-label, pixel neighbourhoods). Every
template has the sections the catalog edits (imports, data, model,
training, evaluate), defines X_train, y_train, X_valid, y_valid, X_test and
test_ids, and is deliberately weak: a shallow tree, naive Bayes, a few
boosting rounds, a linear trend. It handles just enough of the real data to
run (string columns become integer codes; missing values are filled with -1
where its model cannot take NaN, and left as NaN where it can), so that
catalog edits which cannot cope with what the data really holds fail as
they would on a real project.
"""

HEADER = '''#!/usr/bin/env python3
"""Baseline for {id}: {what}.

Sections are delimited by '# === name ===' / '# === end name ===' lines."""
# === imports ===
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import pandas as pd
from sklearn import metrics
{imports}
# === end imports ===

'''

MODELS = {
    # name: (import, constructor, description)
    "tree2": ("from sklearn.tree import DecisionTreeClassifier", "DecisionTreeClassifier(max_depth=2, random_state=0)", "a depth-2 decision tree"),
    "nb": ("from sklearn.naive_bayes import GaussianNB", "GaussianNB()", "Gaussian naive Bayes"),
    "hgb": ("from sklearn.ensemble import HistGradientBoostingClassifier",
            "HistGradientBoostingClassifier(max_iter=5, max_depth=2, random_state=0)", "five rounds of depth-2 gradient boosting"),
    "logreg": ("from sklearn.linear_model import LogisticRegression", "LogisticRegression(max_iter=30)",
               "an unscaled logistic regression stopped after 30 iterations"),
    "reg-linear": ("from sklearn.linear_model import LinearRegression", "LinearRegression()", "a linear regression"),
    "reg-tree2": ("from sklearn.tree import DecisionTreeRegressor", "DecisionTreeRegressor(max_depth=2, random_state=0)",
                  "a depth-2 regression tree"),
    "reg-hgb": ("from sklearn.ensemble import HistGradientBoostingRegressor",
                "HistGradientBoostingRegressor(max_iter=5, max_depth=2, random_state=0)", "five rounds of depth-2 gradient boosting"),
    "ml-logreg": ("from sklearn.linear_model import LogisticRegression\nfrom sklearn.multiclass import OneVsRestClassifier",
                  "OneVsRestClassifier(LogisticRegression(C=0.001, max_iter=50))", "one strongly regularised logistic regression per tag"),
    "ml-tree2": ("from sklearn.tree import DecisionTreeClassifier", "DecisionTreeClassifier(max_depth=2, random_state=0)",
                 "one depth-2 decision tree for all tags"),
}

ENCODE = '''# String columns become integer codes (their sorted training values in
# order); a value unseen in training, or missing, becomes -1.
for c in FEATURES:
    if train[c].dtype == object:
        codes = {v: k for k, v in enumerate(sorted(train[c].dropna().unique()))}
        for df in (train, valid, test):
            df[c] = df[c].map(codes).fillna(-1)
'''

FILL = '''# Missing values become -1: the model below cannot take NaN.
X_train, X_valid, X_test = X_train.fillna(-1), X_valid.fillna(-1), X_test.fillna(-1)
'''

MIDDLE = '''# === model ===
model = {ctor}
# === end model ===

# === training ===
model.fit(X_train, y_train)
# === end training ===

# === evaluate ===
# final_model (set by a training idea, e.g. a refit on train+valid) makes the
# submission; the validation metric always comes from model.
final_model = globals().get("final_model", model)
'''

SINGLE_EVAL = {
    "roc_auc": ('p_valid = model.predict_proba(X_valid)[:, 1]\nprint("VAL_METRIC roc_auc %.6f" % metrics.roc_auc_score(y_valid, p_valid))\n'
                "p_test = final_model.predict_proba(X_test)[:, 1]\n", "p_test"),
    "log_loss": ('p_valid = model.predict_proba(X_valid)[:, 1]\nprint("VAL_METRIC log_loss %.6f" % metrics.log_loss(y_valid, p_valid))\n'
                 "p_test = final_model.predict_proba(X_test)[:, 1]\n", "p_test"),
    "accuracy": ('pred_valid = model.predict(X_valid)\nprint("VAL_METRIC accuracy %.6f" % metrics.accuracy_score(y_valid, pred_valid))\n'
                 "pred_test = final_model.predict(X_test)\n", "pred_test"),
    "f1_macro": ('pred_valid = model.predict(X_valid)\nprint("VAL_METRIC f1_macro %.6f" % metrics.f1_score(y_valid, pred_valid, average="macro"))\n'
                 "pred_test = final_model.predict(X_test)\n", "pred_test"),
    "rmse": ('pred_valid = model.predict(X_valid)\nprint("VAL_METRIC rmse %.6f" % metrics.mean_squared_error(y_valid, pred_valid) ** 0.5)\n'
             "pred_test = final_model.predict(X_test)\n", "pred_test"),
    "mae": ('pred_valid = model.predict(X_valid)\nprint("VAL_METRIC mae %.6f" % metrics.mean_absolute_error(y_valid, pred_valid))\n'
            "pred_test = final_model.predict(X_test)\n", "pred_test"),
}


def single_eval(metric):
    code, var = SINGLE_EVAL[metric]
    return code + 'pd.DataFrame({"id": test_ids, TARGET: %s}).to_csv("submission.csv", index=False)\n# === end evaluate ===\n' % var


def load(target):
    return ('train = pd.read_csv("train.csv")\nvalid = pd.read_csv("valid.csv")\ntest = pd.read_csv("test.csv")\n'
            "TARGET = %r\n" % target)


def tabular(meta, spec, target):
    """A feature table: every column but id and the target is a feature."""
    imp, ctor, what = MODELS[spec["model"]]
    data = load(target) + 'FEATURES = [c for c in train.columns if c not in ("id", TARGET)]\n'
    if spec.get("strings"):
        data += ENCODE
    data += ("X_train, y_train = train[FEATURES], train[TARGET]\nX_valid, y_valid = valid[FEATURES], valid[TARGET]\n"
             'X_test, test_ids = test[FEATURES], test["id"]\n')
    if spec.get("missing") == "fill":
        data += FILL
    return HEADER.format(id=meta["id"], what=what, imports=imp) + "# === data ===\n" + data + "# === end data ===\n\n" + \
        MIDDLE.format(ctor=ctor) + single_eval(meta["metric"])


def pixels(meta, spec, target):
    """Pixel neighbourhoods: the first IMG_SIDE**2 columns are one band's
    pixels (row-major), the image ideas' convention."""
    imp, ctor, what = MODELS[spec["model"]]
    data = ("IMG_SIDE = %d  # the first IMG_SIDE**2 feature columns are one band's pixels, row-major\n"
            "IMG_MAX = %d  # pixel values are 0..IMG_MAX\n" % (spec["side"], spec["max"]))
    data += load(target) + 'FEATURES = [c for c in train.columns if c not in ("id", TARGET)]\n'
    data += ("X_train, y_train = train[FEATURES], train[TARGET]\nX_valid, y_valid = valid[FEATURES], valid[TARGET]\n"
             'X_test, test_ids = test[FEATURES], test["id"]\n')
    return HEADER.format(id=meta["id"], what=what, imports=imp) + "# === data ===\n" + data + "# === end data ===\n\n" + \
        MIDDLE.format(ctor=ctor) + single_eval(meta["metric"])


def text(meta, spec, target):
    """One `text` column: 40 word counts and Bernoulli naive Bayes."""
    imp = "from sklearn.feature_extraction.text import CountVectorizer\nfrom sklearn.naive_bayes import BernoulliNB"
    data = load(target) + (
        "vectorizer = CountVectorizer(max_features=40)\n"
        'X_train = vectorizer.fit_transform(train["text"])\nX_valid = vectorizer.transform(valid["text"])\n'
        'X_test = vectorizer.transform(test["text"])\ny_train, y_valid, test_ids = train[TARGET], valid[TARGET], test["id"]\n')
    return HEADER.format(id=meta["id"], what="Bernoulli naive Bayes on the 40 most frequent words", imports=imp) + \
        "# === data ===\n" + data + "# === end data ===\n\n" + MIDDLE.format(ctor="BernoulliNB()") + single_eval(meta["metric"])


def series(meta, spec, target):
    """A univariate forecast from a linear trend in t (co2-weekly's layout)."""
    imp = "from sklearn.linear_model import LinearRegression"
    data = ("PERIOD = %s  # seasonal period, in time steps\n"
            "HORIZON = %d  # steps between the last known value and the last step to forecast\n" % (spec["period"], spec["horizon"]))
    data += load(target) + (
        "train = train.dropna(subset=[TARGET])\n"
        "# Known values by time step (for lag features; test values are unknown).\n"
        'history = pd.concat([train, valid]).set_index("t")[TARGET]\n\n\n'
        "def features(df):\n"
        '    return pd.DataFrame({"t": df["t"].astype(float)}, index=df.index)\n\n\n'
        "X_train, y_train = features(train), train[TARGET]\nX_valid, y_valid = features(valid), valid[TARGET]\n"
        'X_test, test_ids = features(test), test["id"]\n')
    return HEADER.format(id=meta["id"], what="a straight line through time", imports=imp) + "# === data ===\n" + data + \
        "# === end data ===\n\n" + MIDDLE.format(ctor="LinearRegression()") + single_eval(meta["metric"])


def multilabel(meta, spec, targets):
    imp, ctor, what = MODELS[spec["model"]]
    data = ('train = pd.read_csv("train.csv")\nvalid = pd.read_csv("valid.csv")\ntest = pd.read_csv("test.csv")\n'
            "TARGETS = %r\n" % list(targets) +
            'FEATURES = [c for c in train.columns if c != "id" and c not in TARGETS]\n')
    if spec.get("strings"):
        data += ENCODE
    data += ("X_train, y_train = train[FEATURES], train[TARGETS]\nX_valid, y_valid = valid[FEATURES], valid[TARGETS]\n"
             'X_test, test_ids = test[FEATURES], test["id"]\n')
    if spec.get("missing") == "fill":
        data += FILL
    ev = ('pred_valid = np.asarray(model.predict(X_valid))\n'
          'print("VAL_METRIC f1_macro %.6f" % metrics.f1_score(y_valid, pred_valid, average="macro", zero_division=0))\n'
          "pred_test = np.asarray(final_model.predict(X_test)).astype(int)\n"
          "submission = pd.DataFrame(pred_test, columns=TARGETS)\n"
          'submission.insert(0, "id", test_ids.to_numpy())\nsubmission.to_csv("submission.csv", index=False)\n# === end evaluate ===\n')
    return HEADER.format(id=meta["id"], what=what, imports=imp) + "# === data ===\n" + data + "# === end data ===\n\n" + \
        MIDDLE.format(ctor=ctor) + ev


KINDS = {"tabular": tabular, "pixels": pixels, "text": text, "series": series}


def train_script(meta):
    """The initial train.py of a task that declares `script` (a dict with
    `kind` and its options), or None for a hand-written one."""
    spec = meta.get("script")
    if not spec:
        return None
    if spec["kind"] == "multilabel":
        return multilabel(meta, spec, meta["pred_columns"])
    return KINDS[spec["kind"]](meta, spec, meta["pred_columns"][0])
