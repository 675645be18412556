"""MLE-bench's own grader for an imported competition (`mlerl ingest tasks
--from mlebench --grader mlebench`).

Usage: python3 private/grade.py <submission.csv> <answers.csv>

Reads grade.json beside this file ({"competition", "grade_fn", "answers"}),
imports the competition's grade function from the installed `mlebench`
package (grade_fn is config.yaml's grader.grade_fn, such as
"mlebench.competitions.spaceship-titanic.grade:grade"), calls it on the
submission and the answers read as MLE-bench reads them, and prints ONE
JSON line, exiting 0: {"valid": true, "score": x} with the score rounded
as MLE-bench rounds it, or {"valid": false, "reason": "..."} for a
missing or unreadable submission, an InvalidSubmissionError, any other
exception of the grade function (MLE-bench counts those invalid too) or a
score that is not a finite number. Only a grader environment without
pandas or mlebench exits 2, with the reason on stderr: that is not the
submission's fault.
"""
import importlib
import json
import math
import os
import sys


def verdict(valid, score=None, reason=None):
    out = {"valid": valid}
    if valid:
        out["score"] = score
    else:
        out["reason"] = reason
    print(json.dumps(out))
    sys.exit(0)


def broken(msg):
    sys.stderr.write("mlebench grader: %s\n" % msg)
    sys.exit(2)


def one_line(e):
    text = " ".join(str(e).split())
    if len(text) > 300:
        text = text[:300] + "..."
    return "%s: %s" % (type(e).__name__, text) if text else type(e).__name__


def main():
    if len(sys.argv) != 3:
        broken("usage: grade.py <submission.csv> <answers.csv>")
    sub_path, ans_path = sys.argv[1], sys.argv[2]
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "grade.json")) as f:
        cfg = json.load(f)
    module_name, _, fn_name = cfg["grade_fn"].partition(":")
    try:
        import pandas as pd
    except ImportError as e:
        broken("pandas is not importable by %s (%s)" % (sys.executable, e))
    try:
        from mlebench.grade_helpers import InvalidSubmissionError
        grade_fn = getattr(importlib.import_module(module_name), fn_name)
    except Exception as e:  # ImportError, or an error while importing
        broken(
            "cannot import %s from the mlebench package with %s (%s): install MLE-bench "
            "(pip install -e <mle-bench checkout>, with its requirements) into that interpreter, "
            "or set python to one that has it" % (cfg["grade_fn"], sys.executable, one_line(e))
        )

    def read_csv(path):
        # As mlebench.utils.read_csv: exact floats, and an empty file is an empty frame.
        try:
            return pd.read_csv(path, float_precision="round_trip")
        except pd.errors.EmptyDataError:
            return pd.DataFrame()

    if not os.path.isfile(sub_path):
        verdict(False, reason="no submission file %s" % os.path.basename(sub_path))
    try:
        submission = read_csv(sub_path)
    except Exception as e:
        verdict(False, reason="the submission is not a readable CSV file (%s)" % one_line(e))
    if cfg.get("answers") == "jsonl":
        with open(ans_path) as f:
            answers = [json.loads(line) for line in f if line.strip()]
    else:
        answers = read_csv(ans_path)
    try:
        score = grade_fn(submission, answers)
    except InvalidSubmissionError as e:
        verdict(False, reason="invalid submission (%s)" % (" ".join(str(e).split()) or "no reason given"))
    except Exception as e:
        verdict(False, reason="%s's grade function failed on the submission: %s" % (cfg["competition"], one_line(e)))
    try:
        score = float(score)
    except (TypeError, ValueError):
        verdict(False, reason="the grade function returned %r, not a number" % (score,))
    if not math.isfinite(score):
        verdict(False, reason="the grade function returned %r" % score)
    verdict(True, score=round(score, 5))


main()
