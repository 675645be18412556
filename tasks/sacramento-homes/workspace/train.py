#!/usr/bin/env python3
"""Baseline for sacramento-homes: a linear regression.

Sections are delimited by '# === name ===' / '# === end name ===' lines."""
# === imports ===
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import pandas as pd
from sklearn import metrics
from sklearn.linear_model import LinearRegression
# === end imports ===

# === data ===
train = pd.read_csv("train.csv")
valid = pd.read_csv("valid.csv")
test = pd.read_csv("test.csv")
TARGET = 'price'
FEATURES = [c for c in train.columns if c not in ("id", TARGET)]
# String columns become integer codes (their sorted training values in
# order); a value unseen in training, or missing, becomes -1.
for c in FEATURES:
    if train[c].dtype == object:
        codes = {v: k for k, v in enumerate(sorted(train[c].dropna().unique()))}
        for df in (train, valid, test):
            df[c] = df[c].map(codes).fillna(-1)
X_train, y_train = train[FEATURES], train[TARGET]
X_valid, y_valid = valid[FEATURES], valid[TARGET]
X_test, test_ids = test[FEATURES], test["id"]
# === end data ===

# === model ===
model = LinearRegression()
# === end model ===

# === training ===
model.fit(X_train, y_train)
# === end training ===

# === evaluate ===
# final_model (set by a training idea, e.g. a refit on train+valid) makes the
# submission; the validation metric always comes from model.
final_model = globals().get("final_model", model)
pred_valid = model.predict(X_valid)
print("VAL_METRIC mae %.6f" % metrics.mean_absolute_error(y_valid, pred_valid))
pred_test = final_model.predict(X_test)
pd.DataFrame({"id": test_ids, TARGET: pred_test}).to_csv("submission.csv", index=False)
# === end evaluate ===
