#!/usr/bin/env python3
"""Baseline for austen-novel: Bernoulli naive Bayes on the 40 most frequent words.

Sections are delimited by '# === name ===' / '# === end name ===' lines."""
# === imports ===
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import pandas as pd
from sklearn import metrics
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.naive_bayes import BernoulliNB
# === end imports ===

# === data ===
train = pd.read_csv("train.csv")
valid = pd.read_csv("valid.csv")
test = pd.read_csv("test.csv")
TARGET = 'novel'
vectorizer = CountVectorizer(max_features=40)
X_train = vectorizer.fit_transform(train["text"])
X_valid = vectorizer.transform(valid["text"])
X_test = vectorizer.transform(test["text"])
y_train, y_valid, test_ids = train[TARGET], valid[TARGET], test["id"]
# === end data ===

# === model ===
model = BernoulliNB()
# === end model ===

# === training ===
model.fit(X_train, y_train)
# === end training ===

# === evaluate ===
# final_model (set by a training idea, e.g. a refit on train+valid) makes the
# submission; the validation metric always comes from model.
final_model = globals().get("final_model", model)
pred_valid = model.predict(X_valid)
print("VAL_METRIC f1_macro %.6f" % metrics.f1_score(y_valid, pred_valid, average="macro"))
pred_test = final_model.predict(X_test)
pd.DataFrame({"id": test_ids, TARGET: pred_test}).to_csv("submission.csv", index=False)
# === end evaluate ===
