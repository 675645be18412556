"""MLE-bench's own grader for an imported competition (`mlerl ingest tasks
--from mlebench --grader mlebench`).

Usage: python3 private/grade.py <submission.csv> <answers.csv> [<parts.csv>]

Reads grade.json beside this file ({"competition", "grade_fn", "answers"}),
imports the competition's grade function from the installed `mlebench`
package (grade_fn is config.yaml's grader.grade_fn, such as
"mlebench.competitions.spaceship-titanic.grade:grade"), calls it on the
submission and the answers read as MLE-bench reads them, and prints ONE
JSON line, exiting 0: {"valid": true, "score": x} with the score rounded
as MLE-bench rounds it, or {"valid": false, "reason": "..."} for a
missing or unreadable submission, an InvalidSubmissionError, any other
exception of the grade function (MLE-bench counts those invalid too) or a
score that is not a finite number. Given parts.csv (id,part per answers
row, in their order; the id is the answers' first column), a valid
verdict also carries {"public": x, "private": y}: the grade function
called on each part's answers and the submission's rows with those ids.
Only a grader environment without
pandas or mlebench exits 2, with the reason on stderr: that is not the
submission's fault.
"""
import importlib
import json
import math
import os
import sys


def verdict(valid, score=None, reason=None, parts=None):
    out = {"valid": valid}
    if valid:
        out["score"] = score
        if parts:
            out.update(parts)
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
    if len(sys.argv) not in (3, 4):
        broken("usage: grade.py <submission.csv> <answers.csv> [<parts.csv>]")
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
    def grade(sub, ans, where):
        try:
            score = grade_fn(sub, ans)
        except InvalidSubmissionError as e:
            verdict(False, reason="invalid submission%s (%s)" % (where, " ".join(str(e).split()) or "no reason given"))
        except Exception as e:
            verdict(False, reason="%s's grade function failed on the submission%s: %s" % (cfg["competition"], where, one_line(e)))
        try:
            score = float(score)
        except (TypeError, ValueError):
            verdict(False, reason="the grade function returned %r%s, not a number" % (score, where))
        if not math.isfinite(score):
            verdict(False, reason="the grade function returned %r%s" % (score, where))
        return round(score, 5)

    score = grade(submission, answers, "")
    if len(sys.argv) == 3:
        verdict(True, score=score)
    if not isinstance(answers, pd.DataFrame) or answers.shape[1] == 0:
        broken("the hidden answers are not a table, so they cannot be cut into parts: grade without parts.csv")
    parts = pd.read_csv(sys.argv[3], dtype=str, keep_default_na=False)
    idc = answers.columns[0]
    # parts.csv holds the answers' first column as written (Go read the
    # text); compare with the text, then cut both frames by the values as
    # MLE-bench's reader typed them, the same way for both.
    raw = pd.read_csv(ans_path, dtype=str, keep_default_na=False)
    if list(parts.columns) != ["id", "part"] or [v.strip() for v in parts["id"]] != [v.strip() for v in raw.iloc[:, 0]]:
        broken("parts file %s does not list the answers' ids (%s) in their order" % (sys.argv[3], idc))
    out = {}
    for name in ("public", "private"):
        keep = [p.strip() == name for p in parts["part"]]
        ans_p = answers[keep].reset_index(drop=True)
        sub_p = submission
        if idc in submission.columns:
            sub_p = submission[submission[idc].isin(ans_p[idc])].reset_index(drop=True)
        out[name] = grade(sub_p, ans_p, " (on the %s part)" % name)
    verdict(True, score=score, parts=out)


main()
