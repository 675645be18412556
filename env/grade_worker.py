"""Warm grader worker for env (trusted code: the tasks' graders).

Imports numpy, pandas and scikit-learn once, then for each request line
{"dir", "grader", "submission", "answers", "parts", "inproc"} runs the
grader as `python grader submission answers [parts]` would (parts, the
hidden answers' parts.csv, when the request names one) (runpy, __main__, argv) in dir
with stdout and stderr going to dir/.grade_stdout and dir/.grade_stderr,
and answers {"status": exit_code, "inproc": bool}. A grader runs in a
forked child, or, with "inproc" (the Go side sends it only for the
built-in suite's grader template, a pure function of its two files), in
this process: a forked child's copy-on-write page faults cost 60-100 ms,
the grade about 5 ms.
The Go side enforces the time limit by killing the worker's process group.
"""
import contextlib
import json
import os
import runpy
import sys
import traceback

import numpy  # noqa: F401  (preloaded for the graders)
import pandas  # noqa: F401
import sklearn.metrics  # noqa: F401

proto = os.fdopen(os.dup(1), "w")
proto.write("ready\n")
proto.flush()


def child(req):
    os.close(proto.fileno())  # the protocol pipe is the worker's alone
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.chdir(req["dir"])
    out = os.open(os.path.join(req["dir"], ".grade_stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(os.path.join(req["dir"], ".grade_stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    sys.argv = argv_of(req)
    sys.path.insert(0, os.path.dirname(req["grader"]))
    code = run(req["grader"])
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def argv_of(req):
    argv = [req["grader"], req["submission"], req["answers"]]
    if req.get("parts"):
        argv.append(req["parts"])
    return argv


def run(grader):
    """Runs grader as __main__ and returns its exit status."""
    try:
        runpy.run_path(grader, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        sys.stderr.write(str(e.code) + "\n")
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def inproc(req):
    """Runs a suite-template grader in this process; cwd and argv are put
    back after it."""
    opener = lambda path, flags: os.open(path, flags, 0o600)
    cwd, argv = os.getcwd(), sys.argv
    with open(os.path.join(req["dir"], ".grade_stdout"), "w", opener=opener) as out, \
            open(os.path.join(req["dir"], ".grade_stderr"), "w", opener=opener) as err, \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            os.chdir(req["dir"])
            sys.argv = argv_of(req)
            return run(req["grader"]) & 0xFF
        finally:
            sys.argv = argv
            os.chdir(cwd)


for line in sys.stdin:
    req = json.loads(line)
    if req.get("inproc"):
        proto.write(json.dumps({"status": inproc(req), "inproc": True}) + "\n")
        proto.flush()
        continue
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(req)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else (status >> 8)
    proto.write(json.dumps({"status": code}) + "\n")
    proto.flush()
