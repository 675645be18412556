#!/usr/bin/env python3
"""Baseline for paper-topics-graph: logistic regression on each paper's own word features, ignoring the citations.

Sections are delimited by '# === name ===' / '# === end name ===' lines."""
# === imports ===
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import pandas as pd
from scipy import sparse
from sklearn import metrics
from sklearn.linear_model import LogisticRegression
# === end imports ===

# === data ===
nodes = pd.read_csv("nodes.csv")  # node id = row number
edges = pd.read_csv("edges.csv")
train = pd.read_csv("train.csv")
valid = pd.read_csv("valid.csv")
test = pd.read_csv("test.csv")
TARGET = "label"
n_nodes = len(nodes)
# Symmetric 0/1 adjacency matrix (scipy CSR).
A = sparse.coo_matrix((np.ones(len(edges)), (edges["src"], edges["dst"])), shape=(n_nodes, n_nodes)).tocsr()
A = ((A + A.T) > 0).astype(float)
# Node feature matrix; ideas add columns to F and re-slice X_*.
F = nodes.drop(columns=["id"]).to_numpy(dtype=float)
idx_train, idx_valid, idx_test = train["id"].to_numpy(), valid["id"].to_numpy(), test["id"].to_numpy()
X_train, y_train = F[idx_train], train[TARGET]
X_valid, y_valid = F[idx_valid], valid[TARGET]
X_test, test_ids = F[idx_test], test["id"]
# === end data ===

# === model ===
model = LogisticRegression(C=0.05, max_iter=200)
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
