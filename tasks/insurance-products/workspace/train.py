#!/usr/bin/env python3
"""Baseline for insurance-products: one strongly regularised logistic regression per tag.

Sections are delimited by '# === name ===' / '# === end name ===' lines."""
# === imports ===
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import pandas as pd
from sklearn import metrics
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier
# === end imports ===

# === data ===
train = pd.read_csv("train.csv")
valid = pd.read_csv("valid.csv")
test = pd.read_csv("test.csv")
TARGETS = ['has_car_policy', 'has_fire_policy', 'has_life_policy', 'has_moped_policy']
FEATURES = [c for c in train.columns if c != "id" and c not in TARGETS]
# String columns become integer codes (their sorted training values in
# order); a value unseen in training, or missing, becomes -1.
for c in FEATURES:
    if train[c].dtype == object:
        codes = {v: k for k, v in enumerate(sorted(train[c].dropna().unique()))}
        for df in (train, valid, test):
            df[c] = df[c].map(codes).fillna(-1)
X_train, y_train = train[FEATURES], train[TARGETS]
X_valid, y_valid = valid[FEATURES], valid[TARGETS]
X_test, test_ids = test[FEATURES], test["id"]
# === end data ===

# === model ===
model = OneVsRestClassifier(LogisticRegression(C=0.001, max_iter=50))
# === end model ===

# === training ===
model.fit(X_train, y_train)
# === end training ===

# === evaluate ===
# final_model (set by a training idea, e.g. a refit on train+valid) makes the
# submission; the validation metric always comes from model.
final_model = globals().get("final_model", model)
pred_valid = np.asarray(model.predict(X_valid))
print("VAL_METRIC f1_macro %.6f" % metrics.f1_score(y_valid, pred_valid, average="macro", zero_division=0))
pred_test = np.asarray(final_model.predict(X_test)).astype(int)
submission = pd.DataFrame(pred_test, columns=TARGETS)
submission.insert(0, "id", test_ids.to_numpy())
submission.to_csv("submission.csv", index=False)
# === end evaluate ===
