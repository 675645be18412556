#!/usr/bin/env python3
"""Baseline for satellite-landcover: Gaussian naive Bayes.

Sections are delimited by '# === name ===' / '# === end name ===' lines."""
# === imports ===
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import pandas as pd
from sklearn import metrics
from sklearn.naive_bayes import GaussianNB
# === end imports ===

# === data ===
IMG_SIDE = 3  # the first IMG_SIDE**2 feature columns are one band's pixels, row-major
IMG_MAX = 255  # pixel values are 0..IMG_MAX
train = pd.read_csv("train.csv")
valid = pd.read_csv("valid.csv")
test = pd.read_csv("test.csv")
TARGET = 'cover'
FEATURES = [c for c in train.columns if c not in ("id", TARGET)]
X_train, y_train = train[FEATURES], train[TARGET]
X_valid, y_valid = valid[FEATURES], valid[TARGET]
X_test, test_ids = test[FEATURES], test["id"]
# === end data ===

# === model ===
model = GaussianNB()
# === end model ===

# === training ===
model.fit(X_train, y_train)
# === end training ===

# === evaluate ===
# final_model (set by a training idea, e.g. a refit on train+valid) makes the
# submission; the validation metric always comes from model.
final_model = globals().get("final_model", model)
pred_valid = model.predict(X_valid)
print("VAL_METRIC accuracy %.6f" % metrics.accuracy_score(y_valid, pred_valid))
pred_test = final_model.predict(X_test)
pd.DataFrame({"id": test_ids, TARGET: pred_test}).to_csv("submission.csv", index=False)
# === end evaluate ===
