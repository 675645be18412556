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


# A submission is read only after its header and first row are checked:
# each must end within HEADER_BYTES and hold at most max(MAX_COLUMNS, 4 x
# the answers' columns) fields. This grader runs outside the sandbox, and
# one that does not finish fails the step: pandas takes time quadratic in
# a header's repeated names (200,000 of them ran for minutes).
MAX_COLUMNS = 1000
HEADER_BYTES = 1 << 20


def check_header(path, max_fields):
    """Refuses (an invalid verdict) a submission whose header or first row
    (its first two lines that are not blank) has more than max_fields
    fields or does not end within HEADER_BYTES."""
    import csv
    import io

    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES + 1)
    cut = len(head) > HEADER_BYTES
    text = head[:HEADER_BYTES].decode("utf-8", "replace").lstrip("\ufeff")
    lines = io.StringIO(text, newline="")
    what = ["header", "first row"]
    seen = 0
    limit = csv.field_size_limit(HEADER_BYTES)
    try:
        for rec in csv.reader(lines):
            if len(rec) <= 1 and not "".join(rec).strip():
                continue
            if cut and lines.tell() >= len(text):
                break  # the line may go on past the bytes read
            if len(rec) > max_fields:
                verdict(False, reason="the submission's %s has %d fields, more than the %d allowed" % (what[seen], len(rec), max_fields))
            seen += 1
            if seen == len(what):
                return
    except csv.Error as e:
        verdict(False, reason="the submission's %s is not a readable CSV line (%s)" % (what[seen], one_line(e)))
    finally:
        csv.field_size_limit(limit)
    if cut:
        verdict(False, reason="the submission's %s does not end within its first %d bytes" % (what[seen], HEADER_BYTES))


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
    if cfg.get("answers") == "jsonl":
        with open(ans_path) as f:
            answers = [json.loads(line) for line in f if line.strip()]
        check_header(sub_path, MAX_COLUMNS)
    else:
        answers = read_csv(ans_path)
        check_header(sub_path, max(MAX_COLUMNS, 4 * answers.shape[1]))
    try:
        submission = read_csv(sub_path)
    except Exception as e:
        verdict(False, reason="the submission is not a readable CSV file (%s)" % one_line(e))
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
