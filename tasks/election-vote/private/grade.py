#!/usr/bin/env python3
"""Grader for one task of the built-in mlerl suite.

Usage: python3 private/grade.py <submission.csv> <answers.csv> [<parts.csv>]

Prints ONE line of JSON and exits 0 for every submission, good or bad:
  {"valid": true, "score": <float>}
  {"valid": false, "reason": "<why the submission is invalid>"}
Given parts.csv (a header id,part and one line per answers row, in the
answers' order, part public or private), a valid verdict also carries the
score on each part of the hidden answers:
  {"valid": true, "score": <all rows>, "public": <float>, "private": <float>}

The task-specific settings are the constants below; the rest is shared by
every task (tasks/grade_template.py, copied by tasks/generate.py). Only a
broken grader environment (numpy, pandas or scikit-learn missing) exits 2
with a message on stderr: that is not the submission's fault.
"""
# === grader settings ===
METRIC = 'accuracy'
ID_COLUMN = "id"
PRED_COLUMNS = ['vote']
# === end grader settings ===

import csv
import io
import json
import math
import sys

try:
    import numpy as np
    import pandas as pd
    from sklearn import metrics
except ImportError as e:  # the grader's environment, not the submission, is at fault
    sys.stderr.write("grade.py: %s; run it with an interpreter that has numpy, pandas and scikit-learn (make setup installs them)\n" % e)
    sys.exit(2)


# A submission's header and first row may have at most MAX_COLUMNS fields
# each and must end within its first HEADER_BYTES bytes: pandas takes time
# quadratic in a header's repeated (or empty) names, makes the extra
# fields of a first row wider than the header the levels of an index, and
# a frame as wide as a 256 MiB line would not fit in memory. The widest
# table of the suite has under 200 columns.
MAX_COLUMNS = 1000
HEADER_BYTES = 1 << 20


def emit(obj):
    print(json.dumps(obj))
    sys.exit(0)


def invalid(reason):
    emit({"valid": False, "reason": reason})


def brief(s, n=80):
    """s cut to n characters: a reason quotes the submission, never at length."""
    return s if len(s) <= n else s[:n] + "..."


def read_csv(path, what, nrows=None):
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, nrows=nrows)
    except FileNotFoundError:
        invalid("%s file %s does not exist" % (what, path))
    except Exception as e:  # empty file, binary garbage, bad quoting...
        invalid("%s file %s is not a readable CSV: %s" % (what, path, brief(str(e).splitlines()[0] if str(e) else type(e).__name__, 200)))


def check_header(path):
    """Refuses a submission whose header or first row (its first two lines
    that are not blank, as pandas finds them) has more than MAX_COLUMNS
    fields or does not end within HEADER_BYTES, before pandas reads it."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES + 1)
    except FileNotFoundError:
        invalid("submission file %s does not exist" % path)
    except OSError as e:
        invalid("submission file %s is not readable: %s" % (path, brief(str(e), 200)))
    cut = len(head) > HEADER_BYTES
    text = head[:HEADER_BYTES].decode("utf-8", "replace").lstrip("\ufeff")
    lines = io.StringIO(text, newline="")
    what = ["header", "first row"]
    seen = 0
    limit = csv.field_size_limit(HEADER_BYTES)  # put back below: the warm worker runs graders in its process
    try:
        for rec in csv.reader(lines):
            if len(rec) <= 1 and not "".join(rec).strip():
                continue  # a blank line: pandas skips it too
            if cut and lines.tell() >= len(text):
                break  # the line may go on past the bytes read
            if len(rec) > MAX_COLUMNS:
                invalid("the submission's %s has %d fields, more than the %d allowed; want columns %s" % (what[seen], len(rec), MAX_COLUMNS, [ID_COLUMN] + PRED_COLUMNS))
            seen += 1
            if seen == len(what):
                return
    except csv.Error as e:
        invalid("the submission's %s is not a readable CSV line: %s" % (what[seen], brief(str(e), 200)))
    finally:
        csv.field_size_limit(limit)
    if cut:
        invalid("the submission's %s does not end within its first %d bytes" % (what[seen], HEADER_BYTES))


def as_float(frame, column):
    out = []
    for i, v in zip(frame[ID_COLUMN], frame[column]):
        try:
            f = float(v)
        except (TypeError, ValueError):
            invalid("column %r, id %s: %s is not a number" % (column, brief(str(i)), brief(repr(v))))
        if math.isnan(f) or math.isinf(f):
            invalid("column %r, id %s: %s is not a finite number" % (column, brief(str(i)), brief(repr(v))))
        out.append(f)
    return out


def score(metric, sub, ans):
    if metric in ("accuracy", "f1_macro") and len(PRED_COLUMNS) == 1:
        col = PRED_COLUMNS[0]
        pred = [v.strip() for v in sub[col]]
        true = [v.strip() for v in ans[col]]
        for i, v in zip(sub[ID_COLUMN], pred):
            if v == "" or v.lower() == "nan":
                invalid("column %r, id %s: empty or NaN label" % (col, brief(str(i))))
        # Labels compare as numbers when both sides are numbers ("1" == "1.0").
        def canon(v):
            try:
                f = float(v)
                return repr(f) if not math.isnan(f) else v
            except ValueError:
                return v
        pred = [canon(v) for v in pred]
        true = [canon(v) for v in true]
        if metric == "accuracy":
            return metrics.accuracy_score(true, pred)
        return metrics.f1_score(true, pred, average="macro", labels=sorted(set(true)))
    if metric == "f1_macro":  # multi-label: one 0/1 column per label
        pred = np.array([as_float(sub, c) for c in PRED_COLUMNS]).T
        true = np.array([as_float(ans, c) for c in PRED_COLUMNS]).T
        bad = ~np.isin(pred, (0.0, 1.0))
        if bad.any():
            r, c = np.argwhere(bad)[0]
            invalid("column %r, id %s: %r is not 0 or 1" % (PRED_COLUMNS[c], brief(str(sub[ID_COLUMN].iloc[r])), pred[r, c]))
        return metrics.f1_score(true, pred, average="macro", zero_division=0)
    col = PRED_COLUMNS[0]
    pred = np.array(as_float(sub, col))
    true = np.array(as_float(ans, col))
    if metric in ("roc_auc", "log_loss"):
        if (pred < 0).any() or (pred > 1).any():
            k = int(np.argmax((pred < 0) | (pred > 1)))
            invalid("column %r, id %s: probability %r is outside [0, 1]" % (col, brief(str(sub[ID_COLUMN].iloc[k])), pred[k]))
        if metric == "roc_auc":
            return metrics.roc_auc_score(true, pred)
        p = np.clip(pred, 1e-15, 1 - 1e-15)
        return float(-np.mean(true * np.log(p) + (1 - true) * np.log(1 - p)))
    if metric == "rmse":
        return float(np.sqrt(np.mean((pred - true) ** 2)))
    if metric == "mae":
        return float(np.mean(np.abs(pred - true)))
    raise ValueError("unknown metric %r" % metric)


def read_parts(path, ans):
    """The part of each answers row (parts.csv, in the answers' order). A
    parts file that does not fit the answers is the host's fault, not the
    submission's: exit 2."""
    try:
        parts = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as e:
        sys.stderr.write("grade.py: parts file %s is not readable: %s\n" % (path, e))
        sys.exit(2)
    ids = [v.strip() for v in ans[ID_COLUMN]]
    if list(parts.columns) != ["id", "part"] or [v.strip() for v in parts["id"]] != ids \
            or not set(v.strip() for v in parts["part"]) <= {"public", "private"}:
        sys.stderr.write("grade.py: parts file %s does not list the answers' ids in their order with parts public/private\n" % path)
        sys.exit(2)
    return np.array([v.strip() for v in parts["part"]])


def main(argv):
    if len(argv) not in (3, 4):
        invalid("usage: grade.py <submission.csv> <answers.csv> [<parts.csv>]")
    ans = read_csv(argv[2], "answers")
    check_header(argv[1])
    # One row past the answers' is enough to refuse an over-long file.
    sub = read_csv(argv[1], "submission", nrows=len(ans) + 1)
    want = [ID_COLUMN] + PRED_COLUMNS
    missing = [c for c in want if c not in sub.columns]
    if missing:
        invalid("submission lacks column(s) %s; want columns %s, got %s" % (missing, want, brief(repr(list(sub.columns)), 300)))
    if len(sub) > len(ans):
        invalid("submission has more than %d rows, want one per test id" % len(ans))
    if len(sub) != len(ans):
        invalid("submission has %d rows, want %d (one per test id)" % (len(sub), len(ans)))
    ids = [v.strip() for v in sub[ID_COLUMN]]
    if len(set(ids)) != len(ids):
        dup = next(v for v in ids if ids.count(v) > 1)
        invalid("submission repeats id %s" % brief(repr(dup)))
    want_ids = [v.strip() for v in ans[ID_COLUMN]]
    unknown = sorted(set(ids) - set(want_ids))
    if unknown:
        invalid("submission has %d id(s) not in the test set, e.g. %s" % (len(unknown), brief(repr(unknown[0]))))
    sub = sub.assign(**{ID_COLUMN: ids}).set_index(ID_COLUMN).loc[want_ids].reset_index()
    ans = ans.assign(**{ID_COLUMN: want_ids})
    s = score(METRIC, sub, ans)
    if s is None or not math.isfinite(s):
        invalid("the %s score is not finite" % METRIC)
    out = {"valid": True, "score": round(float(s), 6)}
    if len(argv) == 4:
        part = read_parts(argv[3], ans)
        for name in ("public", "private"):
            keep = part == name
            p = score(METRIC, sub[keep].reset_index(drop=True), ans[keep].reset_index(drop=True))
            if p is None or not math.isfinite(p):
                invalid("the %s score on the %s part is not finite" % (METRIC, name))
            out[name] = round(float(p), 6)
    emit(out)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except SystemExit:
        raise
    except Exception as e:  # never a traceback for a bad submission
        invalid("could not grade the submission: %s: %s" % (type(e).__name__, brief(str(e), 300)))
