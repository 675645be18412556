#!/usr/bin/env python3
"""Baseline for lynx-trappings: a straight line through time.

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
PERIOD = 9.6  # seasonal period, in time steps
HORIZON = 34  # steps between the last known value and the last step to forecast
train = pd.read_csv("train.csv")
valid = pd.read_csv("valid.csv")
test = pd.read_csv("test.csv")
TARGET = 'lynx'
train = train.dropna(subset=[TARGET])
# Known values by time step (for lag features; test values are unknown).
history = pd.concat([train, valid]).set_index("t")[TARGET]


def features(df):
    return pd.DataFrame({"t": df["t"].astype(float)}, index=df.index)


X_train, y_train = features(train), train[TARGET]
X_valid, y_valid = features(valid), valid[TARGET]
X_test, test_ids = features(test), test["id"]
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
print("VAL_METRIC rmse %.6f" % metrics.mean_squared_error(y_valid, pred_valid) ** 0.5)
pred_test = final_model.predict(X_test)
pd.DataFrame({"id": test_ids, TARGET: pred_test}).to_csv("submission.csv", index=False)
# === end evaluate ===
