# mlerl static instrumenter: inserts nonce-tagged stage markers into a
# training script. Run by instrument.go as `python3 -c <this> serve`; it reads
# one JSON request per line on stdin ({"source": ..., "nonce": ...}) and
# answers one JSON line on stdout ({"source": ..., "inserted": [[line, name]...]}
# or {"error": ...}). Every other line of the script is left byte for byte
# as it was; a marker is one whole line of its own, ending in MARK.
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


def marker_line(indent, nonce, name):
    return '%s__import__("os").write(1, b"@@MLERL %s %s@@\\n")  %s\n' % (indent, nonce, name, MARK)


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

    def render(self, plan, nonce):
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
                out.append(marker_line(indent, nonce, name))
                inserted.append([len(out), name])
        return "".join(out), inserted


def instrument(source, nonce):
    if not re.fullmatch(r"[0-9A-Za-z]{8,64}", nonce):
        raise ValueError("nonce must be 8-64 letters or digits")
    ins = Instrumenter(source)
    plan = ins.plan()
    out, inserted = ins.render(plan, nonce)
    try:
        compile(out, "<instrumented>", "exec", dont_inherit=True)
    except SyntaxError:
        # A section comment sat where a statement cannot go: place the
        # markers by the AST alone.
        ins.sections = {}
        out, inserted = ins.render(ins.plan(), nonce)
        compile(out, "<instrumented>", "exec", dont_inherit=True)
    return out, inserted


def check(source):
    compile(source, "<checked>", "exec", dont_inherit=True)


def serve():
    for line in sys.stdin:
        try:
            req = json.loads(line)
            if req.get("op") == "check":
                check(req["source"])
                resp = {"source": req["source"], "inserted": []}
            else:
                src, inserted = instrument(req["source"], req["nonce"])
                resp = {"source": src, "inserted": inserted}
        except SyntaxError as e:
            resp = {"error": "line %s: %s" % (e.lineno, e.msg)}
        except Exception as e:
            resp = {"error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(resp) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
