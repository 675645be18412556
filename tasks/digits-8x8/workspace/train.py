#!/usr/bin/env python3
"""Baseline for digits-8x8: Gaussian naive Bayes on raw pixel intensities.

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
IMG_SIDE = 8  # images are IMG_SIDE x IMG_SIDE, row-major
IMG_MAX = 16  # pixel intensities are 0..IMG_MAX


def decode(pixels):
    """One base-17 character per pixel -> float matrix (n_images, IMG_SIDE**2)."""
    return np.array([[int(ch, 17) for ch in s] for s in pixels], dtype=float)


train = pd.read_csv("train.csv")
valid = pd.read_csv("valid.csv")
test = pd.read_csv("test.csv")
TARGET = "digit"
X_train, y_train = decode(train["pixels"]), train[TARGET]
X_valid, y_valid = decode(valid["pixels"]), valid[TARGET]
X_test, test_ids = decode(test["pixels"]), test["id"]
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
