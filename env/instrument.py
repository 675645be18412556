# mlerl static instrumenter: inserts stage markers into a training script.
# Run by instrument.go as `python3 -c <this> serve`; it reads one JSON
# request per line on stdin ({"source": ...}) and answers one JSON line on
# stdout ({"source": ..., "inserted": [[line, name]...], "credit": true} or
# {"error": ...}). Every other line of the script is left byte for byte as
# it was; a marker is one whole line of its own, ending in MARK. A script
# the credit check refuses ({"credit": false, "why": "line N: ..."}) is not
# instrumented (see instrument.go).
import ast
import json
import re
import sys
import tokenize

MARK = "# mlerl:inserted"
MARKERS = ["imports_done", "data_loaded", "model_defined", "model_trained", "predictions_made", "submission_written"]
LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
SECTION_RE = re.compile(r"^#\s*===\s*(end\s+)?([A-Za-z_]\w*)\s*===\s*$")
LOAD_CALLS = {"read_csv", "read_parquet", "read_json", "read_table", "read_excel", "read_feather", "read_pickle",
              "load", "loadtxt", "genfromtxt", "fromfile", "open_dataset"}
PREDICT_CALLS = {"predict", "predict_proba", "predict_log_proba", "decision_function"}
WRITE_CALLS = {"to_csv", "savetxt"}
DATA_CONSTRUCTORS = {"DataFrame", "Series", "Path", "Index", "RandomState", "Generator", "KFold", "StratifiedKFold"}


def marker_line(indent, name):
    return "%s__mlerl_mark__(%d)  %s\n" % (indent, MARKERS.index(name), MARK)


def call_names(node):
    """Names of the functions called inside node, not looking into nested
    function or class bodies (those run elsewhere)."""
    out = []
    stack = [node]
    first = True
    while stack:
        n = stack.pop()
        if not first and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        first = False
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute):
                out.append(("attr", f.attr, f.value))
            elif isinstance(f, ast.Name):
                out.append(("name", f.id, None))
        stack.extend(ast.iter_child_nodes(n))
    return out


def is_main_guard(s):
    if not isinstance(s, ast.If):
        return False
    t = s.test
    return (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__"
            and len(t.comparators) == 1 and isinstance(t.comparators[0], ast.Constant) and t.comparators[0].value == "__main__")


def scopes(tree):
    """Statement lists whose statements can be followed by a marker line: the
    module, every function body, and the body of `if __name__ == "__main__":`."""
    out = [tree.body]
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(n.body)
    for s in tree.body:
        if is_main_guard(s):
            out.append(s.body)
    return out


class Instrumenter:
    def __init__(self, source):
        self.source = source
        # Lines as Python numbers them (only \n, \r\n and \r end a line).
        self.lines = LINE_RE.findall(source)
        self.tree = ast.parse(source)
        self.stmts = []  # (stmt, body, index) for every statement of every scope
        for body in scopes(self.tree):
            for i, s in enumerate(body):
                if body is self.tree.body and is_main_guard(s):
                    continue
                self.stmts.append((s, body, i))
        self.stmts.sort(key=lambda t: (t[0].lineno, t[0].col_offset))
        self.sections = self.find_sections()

    def find_sections(self):
        """{name: (header_line, footer_line, footer_indent)} for well-formed
        `# === name ===` ... `# === end name ===` comment pairs."""
        heads, out = {}, {}
        try:
            toks = list(tokenize.generate_tokens(iter(self.lines).__next__))
        except (tokenize.TokenError, SyntaxError):
            return out
        for tok in toks:
            if tok.type != tokenize.COMMENT:
                continue
            m = SECTION_RE.match(tok.string.strip())
            if not m:
                continue
            line = tok.start[0]
            indent = self.lines[line - 1][: tok.start[1]]
            if indent.strip():
                continue  # a comment after code on the same line
            if m.group(1):
                if m.group(2) in heads and m.group(2) not in out:
                    out[m.group(2)] = (heads[m.group(2)], line, indent)
            else:
                heads.setdefault(m.group(2), line)
        return out

    def after_stmt(self, s, body, i):
        """(line, indent) for a marker right after statement s, or None when s
        does not start its own line or shares its last line."""
        text = self.lines[s.lineno - 1]
        indent = text[: len(text) - len(text.lstrip())]
        if len(indent) != s.col_offset or text.lstrip().startswith("elif"):
            return None
        if i + 1 < len(body) and body[i + 1].lineno == s.end_lineno:
            return None
        return (s.end_lineno, indent)

    def stmts_calling(self, names, lo=0, hi=1 << 30, kind="attr"):
        out = []
        for s, body, i in self.stmts:
            if s.lineno < lo or s.end_lineno > hi:
                continue
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if any(k == kind and n in names for k, n, _ in call_names(s)) or (
                    kind == "any" and any(n in names or n.startswith(("read_", "load_", "fetch_")) for _, n, _ in call_names(s))):
                out.append((s, body, i))
        return out

    def plan(self):
        """{marker: (after_line, indent)}."""
        sec = self.sections
        plan = {}
        for name, section in (("imports_done", "imports"), ("data_loaded", "data"), ("model_defined", "model"), ("model_trained", "training")):
            if section in sec:
                plan[name] = (sec[section][1], sec[section][2])
        lo, hi = 0, 1 << 30
        if "evaluate" in sec:
            lo, hi = sec["evaluate"][0], sec["evaluate"][1]
        for name, calls in (("predictions_made", PREDICT_CALLS), ("submission_written", WRITE_CALLS)):
            found = self.stmts_calling(calls, lo, hi)
            if found:
                p = self.after_stmt(*found[-1])
                if p:
                    plan[name] = p
            elif "evaluate" in sec and name == "submission_written":
                plan[name] = (sec["evaluate"][1], sec["evaluate"][2])
        if "imports_done" not in plan:
            imps = [(s, self.tree.body, i) for i, s in enumerate(self.tree.body) if isinstance(s, (ast.Import, ast.ImportFrom))]
            if imps:
                p = self.after_stmt(*imps[-1])
                if p:
                    plan["imports_done"] = p
        if "data_loaded" not in plan:
            loads = self.stmts_calling(LOAD_CALLS, kind="any")
            if loads:
                body = loads[0][1]
                last = [t for t in loads if t[1] is body][-1]  # the whole data set, not just its first file
                p = self.after_stmt(*last)
                if p:
                    plan["data_loaded"] = p
        fits = self.stmts_calling({"fit"})
        if "model_defined" not in plan:
            p = self.model_definition(fits)
            if p:
                plan["model_defined"] = p
        if "model_trained" not in plan and fits:
            p = self.after_stmt(*fits[-1])
            if p:
                plan["model_trained"] = p
        return plan

    def model_definition(self, fits):
        """After the last assignment, before the first .fit(), of the name the
        fit is called on; else after the first constructor-looking assignment."""
        if fits:
            s0 = fits[0][0]
            recv = [v for k, n, v in call_names(s0) if k == "attr" and n == "fit" and isinstance(v, ast.Name)]
            if recv:
                target = recv[0].id
                best = None
                for s, body, i in self.stmts:
                    if s.lineno >= s0.lineno:
                        break
                    if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == target for t in s.targets):
                        best = (s, body, i)
                if best:
                    return self.after_stmt(*best)
        for s, body, i in self.stmts:
            if isinstance(s, ast.Assign) and isinstance(s.value, ast.Call):
                f = s.value.func
                n = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if (n[:1].isupper() and n not in DATA_CONSTRUCTORS) or n in ("make_pipeline",):
                    return self.after_stmt(s, body, i)
        return None

    def render(self, plan):
        by_line = {}
        for name in MARKERS:
            if name in plan:
                line, indent = plan[name]
                by_line.setdefault(line, []).append((indent, name))
        out, inserted = [], []
        for n, text in enumerate(self.lines, 1):
            markers = by_line.get(n, [])
            if markers and not text.endswith(("\n", "\r")):
                text += "\n"  # a last line without newline gets one before its marker
            out.append(text)
            for indent, name in markers:
                out.append(marker_line(indent, name))
                inserted.append([len(out), name])
        return "".join(out), inserted


def instrument(source):
    ins = Instrumenter(source)
    why = credit_check(ins.tree, source)
    if why:
        return None, [], why
    plan = ins.plan()
    out, inserted = ins.render(plan)
    try:
        compile(out, "<instrumented>", "exec", dont_inherit=True)
    except SyntaxError:
        # A section comment sat where a statement cannot go: place the
        # markers by the AST alone.
        ins.sections = {}
        out, inserted = ins.render(ins.plan())
        compile(out, "<instrumented>", "exec", dont_inherit=True)
    return out, inserted, ""


# The credit check: which scripts may earn markers. A marker proves that
# a line ran only as long as nothing else in the process can print its
# line; the sandbox keeps the lines out of the script's code and stops a
# run whose own code touches frames, code objects, memory, tracing or
# compilation (bootstrap.py's guard). This check refuses beforehand, on
# the script's syntax, what could reach those through a library or by a
# name computed at run time: imports outside ALLOWED_MODULES (and the
# parts of them listed in DENIED_QUALIFIED), the builtins that run or look
# up strings (eval, exec, compile, __import__, vars, locals, getattr and
# friends but with a literal name, globals() but for globals().get("x")
# and globals()["x"]), dunder names and attributes outside ALLOWED_DUNDERS,
# the names in DENIED_NAMES wherever they appear, str.format on anything
# but a literal, pandas' query on anything but a literal, and string
# literals that name introspection attributes. A refused script runs as
# written, without markers (no partial credit), and is told why.
ALLOWED_MODULES = {
    "numpy", "pandas", "sklearn", "scipy", "math", "cmath", "statistics", "random", "time", "datetime", "calendar",
    "collections", "itertools", "functools", "operator", "re", "json", "csv", "os", "pathlib", "warnings", "sys",
    "typing", "typing_extensions", "dataclasses", "enum", "abc", "copy", "heapq", "bisect", "textwrap", "decimal",
    "fractions", "numbers", "glob", "fnmatch", "shutil", "gzip", "bz2", "lzma", "zlib", "zipfile", "tarfile", "io",
    "traceback", "logging", "argparse", "threading", "multiprocessing", "concurrent", "subprocess", "signal",
    "atexit", "tempfile", "hashlib", "hmac", "secrets", "uuid", "base64", "binascii", "struct", "array", "contextlib",
    "joblib", "threadpoolctl", "statsmodels", "matplotlib", "seaborn", "xgboost", "lightgbm", "catboost", "tqdm",
    "string", "unicodedata", "difflib", "pprint", "queue", "errno", "stat", "platform", "locale", "inspect", "ast",
    "__future__", "weakref", "keyword", "shlex", "html", "urllib", "codecs", "graphlib", "colorsys", "resource",
    "socket", "select", "PIL", "sqlite3",
}
# Parts of allowed modules that evaluate strings, unpickle, read memory or
# hand out frames; a listed name denies it and everything below it.
DENIED_QUALIFIED = {
    "joblib.externals", "joblib.load", "sklearn.externals", "numpy.ctypeslib", "numpy.lib.stride_tricks",
    "numpy.lib.format", "pandas.read_pickle", "pandas.eval", "pandas.core.computation", "pandas.io.pickle",
    "statsmodels.formula", "statsmodels.api.formula", "logging.config", "scipy.LowLevelCallable",
    "multiprocessing.connection", "multiprocessing.reduction", "multiprocessing.managers", "multiprocessing.set_executable",
    "typing.get_type_hints", "typing.ForwardRef", "typing._eval_type", "string.Formatter", "operator.attrgetter",
    "operator.methodcaller", "threading.settrace", "threading.setprofile", "traceback.walk_stack", "traceback.walk_tb",
}
# The only attributes of these modules a script may use.
MODULE_ALLOW = {
    "inspect": {"signature", "Signature", "Parameter", "isclass", "isfunction", "ismethod", "isroutine", "isbuiltin",
                "isabstract", "getdoc", "cleandoc", "iscoroutinefunction", "isgeneratorfunction"},
    "sys": {"argv", "exit", "stdout", "stderr", "stdin", "version", "version_info", "platform", "maxsize", "float_info",
            "int_info", "getsizeof", "setrecursionlimit", "getrecursionlimit", "byteorder", "executable", "path",
            "hexversion", "implementation", "flags"},
    "ast": {"literal_eval", "parse", "dump"},
}
DENIED_NAMES = {
    "eval", "exec", "compile", "__import__", "vars", "locals", "breakpoint",
    "f_code", "f_back", "f_globals", "f_locals", "f_builtins", "f_trace", "f_lasti", "f_lineno", "tb_frame", "tb_next",
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code", "co_consts",
    "co_code", "co_names", "_getframe", "_current_frames", "settrace", "setprofile", "gettrace", "modules", "meta_path",
    "path_hooks", "path_importer_cache", "addaudithook", "exc_info", "last_traceback", "last_value",
    "ctypes", "ctypeslib", "cloudpickle", "externals", "stride_tricks", "as_strided", "read_pickle", "Formatter",
    "vformat", "dictConfig", "fileConfig", "attrgetter", "methodcaller", "get_type_hints", "ForwardRef",
    "make_dataclass", "Namespace", "Bunch", "makeLogRecord", "SimpleNamespace", "cell_contents", "from_formula",
    "LowLevelCallable", "set_executable", "builtins", "posix", "currentframe", "getouterframes", "getinnerframes",
    "getframeinfo", "getmembers", "getclosurevars", "getattr_static", "walk_stack", "walk_tb",
    "pickle", "_pickle", "cPickle", "dill", "Unpickler", "numpy_pickle", "load_pickle", "smpickle", "marshal",
}
# Modules no attribute may lead to (sys is imported by name only, where
# MODULE_ALLOW applies).
DENIED_ATTRS = {"sys", "gc", "inspect", "importlib", "dis", "ctypes", "builtins", "posix"}
ALLOWED_DUNDERS = {
    "__name__", "__qualname__", "__class__", "__init__", "__doc__", "__version__", "__file__", "__module__", "__len__",
    "__call__", "__iter__", "__next__", "__enter__", "__exit__", "__getitem__", "__setitem__", "__contains__",
    "__str__", "__repr__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__add__",
    "__sub__", "__mul__", "__truediv__", "__neg__", "__bool__", "__new__", "__main__", "__post_init__", "__slots__",
    "__all__", "__future__",
}
# Methods a class of the script may not define: they let numpy read an
# address (__array_interface__ handed out by __getattr__) or a pickle call
# anything.
DENIED_DEFS = {"__getattr__", "__getattribute__", "__array_interface__", "__array_struct__", "__reduce__", "__reduce_ex__"}
STRING_WORDS = re.compile(r"\b(f_code|f_back|f_globals|f_locals|f_builtins|tb_frame|gi_frame|gi_code|cr_frame|cr_code|"
                          r"ag_code|co_consts|co_code|_getframe|_current_frames|__\w+__)\b|/proc/")


def dunder(n):
    return n.startswith("__") and n.endswith("__") and len(n) > 4


class CreditCheck(ast.NodeVisitor):
    def __init__(self, tree):
        self.why = ""
        self.alias = {}  # local name -> dotted module path
        # Names only ever bound to string literals (checked as literals):
        # a template such a name holds is not computed at run time.
        self.literals, other = set(), set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                p = getattr(n, "parent", None)
                if isinstance(p, ast.Assign) and len(p.targets) == 1 and p.targets[0] is n and isinstance(p.value, ast.Constant) and isinstance(p.value.value, str):
                    self.literals.add(n.id)
                else:
                    other.add(n.id)
        self.literals -= other

    def refuse(self, node, msg):
        if not self.why:
            self.why = "line %d: %s" % (getattr(node, "lineno", 0), msg)

    def qualified(self, dotted, node):
        parts = dotted.split(".")
        for i in range(1, len(parts) + 1):
            if ".".join(parts[:i]) in DENIED_QUALIFIED:
                return self.refuse(node, "%s can run or read code behind the instrumentation's back" % dotted)
        if len(parts) > 1 and parts[0] in MODULE_ALLOW and parts[1] not in MODULE_ALLOW[parts[0]]:
            self.refuse(node, "%s.%s is not among the parts of %s an instrumented script may use" % (parts[0], parts[1], parts[0]))

    def name(self, node, n):
        if n in DENIED_NAMES:
            self.refuse(node, "%s can read or run code behind the instrumentation's back" % n)
        elif dunder(n) and n not in ALLOWED_DUNDERS:
            self.refuse(node, "%s reaches into the interpreter" % n)

    def visit_Import(self, node):
        for a in node.names:
            self.module(node, a.name)
            self.qualified(a.name, node)
            self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        if node.level:
            return self.refuse(node, "a relative import loads code the check has not seen")
        self.module(node, node.module)
        for a in node.names:
            if a.name == "*":
                self.refuse(node, "from %s import * brings in names the check cannot see" % node.module)
                continue
            self.name(node, a.name)
            self.qualified(node.module + "." + a.name, node)
            self.alias[a.asname or a.name] = node.module + "." + a.name
        self.generic_visit(node)

    def module(self, node, dotted):
        if dotted.split(".")[0] not in ALLOWED_MODULES:
            self.refuse(node, "import %s: an instrumented script imports only numpy, pandas, scikit-learn, scipy and the standard library's plain modules" % dotted)

    def dotted(self, node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.alias:
            return ".".join([self.alias[node.id]] + parts[::-1])
        return None

    def visit_Name(self, node):
        if node.id == "globals":
            p = getattr(node, "parent", None)
            gp = getattr(p, "parent", None)
            ok = False
            if isinstance(p, ast.Call) and p.func is node and not p.args and not p.keywords:
                if isinstance(gp, ast.Attribute) and gp.attr == "get" and isinstance(getattr(gp, "parent", None), ast.Call):
                    call = gp.parent
                    ok = call.func is gp and call.args and literal_name(call.args[0])
                elif isinstance(gp, ast.Subscript) and isinstance(gp.ctx, ast.Load):
                    ok = literal_name(gp.slice)
            if not ok:
                self.refuse(node, "globals() other than globals().get(\"name\") or globals()[\"name\"]")
        elif node.id in ("getattr", "setattr", "delattr", "hasattr"):
            p = getattr(node, "parent", None)
            if not (isinstance(p, ast.Call) and p.func is node and len(p.args) >= 2 and literal_name(p.args[1])):
                self.refuse(node, "%s with a name computed at run time" % node.id)
            elif node.id != "hasattr" and isinstance(p.args[0], ast.Name) and p.args[0].id in self.alias:
                self.refuse(node, "%s on a module" % node.id)
        elif node.id == "type":
            p = getattr(node, "parent", None)
            if isinstance(p, ast.Call) and p.func is node and len(p.args) > 1:
                self.refuse(node, "type() with three arguments makes a class from names computed at run time")
        else:
            self.name(node, node.id)
        self.generic_visit(node)

    def visit_Attribute(self, node):
        self.name(node, node.attr)
        if node.attr in DENIED_ATTRS:
            self.refuse(node, "the %s module reached through another" % node.attr)
        d = self.dotted(node)
        if d:
            self.qualified(d, node)
        if node.attr in ("format", "format_map") and not isinstance(node.value, ast.Constant) and not (
                isinstance(node.value, ast.Name) and node.value.id in self.literals):
            self.refuse(node, "str.%s on a string computed at run time" % node.attr)
        if node.attr == "query":
            p = getattr(node, "parent", None)
            if not (isinstance(p, ast.Call) and p.func is node and p.args and isinstance(p.args[0], ast.Constant)):
                self.refuse(node, "query() on a string computed at run time")
        self.generic_visit(node)

    def visit_Call(self, node):
        d = self.dotted(node.func) if isinstance(node.func, ast.Attribute) else self.alias.get(getattr(node.func, "id", ""))
        if d in ("numpy.load", "numpy.lib.npyio.load") and len(node.args) > 2:
            self.refuse(node, "numpy.load with allow_pickle given by position: unpickling can call anything")
        self.generic_visit(node)

    def visit_keyword(self, node):
        if node.arg == "style" and not (isinstance(node.value, ast.Constant) and node.value.value == "%"):
            self.refuse(node.value, "a {-style format (logging) looks up attributes by name")
        if node.arg == "allow_pickle" and not (isinstance(node.value, ast.Constant) and node.value.value is False):
            self.refuse(node.value, "allow_pickle: unpickling can call anything")
        if node.arg and dunder(node.arg) and node.arg not in ALLOWED_DUNDERS:
            self.refuse(node.value, "keyword %s reaches into the interpreter" % node.arg)
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        if node.name in DENIED_DEFS:
            self.refuse(node, "a class defining %s" % node.name)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_MatchClass(self, node):
        for a in node.kwd_attrs:
            self.name(node, a)
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, (str, bytes)):
            v = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            for m in STRING_WORDS.finditer(v):
                if m.group(1) not in ALLOWED_DUNDERS:
                    return self.refuse(node, "a string naming %s" % m.group(0))


def literal_name(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value not in DENIED_NAMES and not (
        dunder(node.value) and node.value not in ALLOWED_DUNDERS)


CODING_RE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def credit_check(tree, source):
    """"" when the script may earn markers, else why not ("line N: ...")."""
    for i, line in enumerate(LINE_RE.findall(source)[:2]):
        m = CODING_RE.match(line)
        if m and m.group(1).lower().replace("_", "-") not in ("utf-8", "utf8"):
            # The interpreter would decode the file otherwise than this
            # check reads it (a coding: utf-7 line hides code).
            return "line %d: a coding declaration (%s) other than utf-8" % (i + 1, m.group(1))
    for n in ast.walk(tree):
        for c in ast.iter_child_nodes(n):
            c.parent = n
    v = CreditCheck(tree)
    v.visit(tree)
    return v.why


def check(source):
    compile(source, "<checked>", "exec", dont_inherit=True)


def serve():
    for line in sys.stdin:
        try:
            req = json.loads(line)
            if req.get("op") == "check":
                check(req["source"])
                resp = {"source": req["source"], "inserted": []}
            elif req.get("op") == "credit":
                why = credit_check(ast.parse(req["source"]), req["source"])
                resp = {"source": "", "inserted": [], "credit": not why, "why": why}
            else:
                src, inserted, why = instrument(req["source"])
                resp = {"source": src or "", "inserted": inserted, "credit": not why, "why": why}
        except SyntaxError as e:
            resp = {"error": "line %s: %s" % (e.lineno, e.msg)}
        except Exception as e:
            resp = {"error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(resp) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
