"""Warm grader worker for env (trusted code: the tasks' graders).

Imports numpy, pandas and scikit-learn once, then for each request line
{"dir", "grader", "submission", "answers"} forks a child that runs the
grader as `python grader submission answers` would (runpy, __main__, argv)
in dir with stdout and stderr redirected to dir/.grade_stdout and
dir/.grade_stderr, waits for it and answers {"status": exit_code}.
The Go side enforces the time limit by killing the worker's process group.
"""
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
    sys.argv = [req["grader"], req["submission"], req["answers"]]
    sys.path.insert(0, os.path.dirname(req["grader"]))
    code = 0
    try:
        runpy.run_path(req["grader"], run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            sys.stderr.write(str(e.code) + "\n")
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(req)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else (status >> 8)
    proto.write(json.dumps({"status": code}) + "\n")
    proto.flush()
