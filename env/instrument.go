package env

// Instrumentation for partial credit: before a script runs, marker lines
// are inserted at its stage boundaries (where: below); when reached, each
// writes "@@MLERL <token> <name>@@" to stdout, and [ParseMarkers] credits
// a marker only with its own token.
//
// Why a printed marker proves that the script reached its line, against
// a script written to the reward that knows all of this and can read its
// own process:
//
//   - Each marker's token is HMAC-SHA256(nonce, name) ([MarkerToken]),
//     the nonce fresh per execution and never leaving the host: what one
//     marker prints, in this run or an earlier one, says nothing of
//     another's token.
//   - No token is in the script's process before its marker line runs:
//     not in its code, nor in any frame, local, closure, module, object,
//     file descriptor, environment or file it can reach. The inserted line
//     is __mlerl_mark__(k); the marker lines (sandbox.Request.Marks) stay
//     in the runner, which holds one listening socket per marker (made in
//     the run's network namespace under an abstract name, handed over
//     before the script starts) and answers a connection to marker k's
//     with line k, only when the connecting process is the script's
//     (SO_PEERCRED). The process's __mlerl_mark__ connects and prints the
//     answer only when its caller is the instrumented code at marker k's
//     line; a call from anywhere else, a connection to a marker's socket
//     from any other code (the sandbox's audit hook sees every connect
//     the socket module makes) and a script that execs itself in place
//     stop the run. What a library finds by reading frames (pandas'
//     query and eval with level=, which reach the runner's own frames
//     above the script's; inspect.stack), the garbage collector, /proc/self
//     or the bootstrap's source is the sockets' names at most.
//   - The sandbox stops the run (outcome killed) when the script's own
//     code reads frames or code objects, walks the garbage collector,
//     uses ctypes or marshal, or compiles code; when anything sets a trace
//     or profile function (which could jump to a marker's line), opens a
//     process's memory or unpickles a known gadget (eval, getattr,
//     os.system...). The process is not dumpable: neither it nor its
//     children read its memory through /proc or ptrace. Nothing outside
//     the interpreter's folders is imported, so no code the check below
//     has not read runs in the process.
//   - Before the run, a static credit check (instrument.py's
//     credit_check) refuses what could reach the same through a library
//     or a name computed at run time: eval and friends, getattr of a
//     computed name, str.format on a computed template, inspect's frame
//     functions, cloudpickle, loading pickles, dunder attributes, imports
//     outside an allowlist... A refused script runs exactly as written,
//     without markers ([NoCreditError]: no partial credit, and the
//     observation says why). The built-in suite's scripts and the
//     catalog's edits pass it and earn what they always did.
//   - A complete marker line with a wrong token (a guess) voids every
//     marker of the run.
//
// What this does not stop, and why it is bounded: a marker proves that
// its line ran, which needs either the statements before it to run (no
// jump: a trace function is stopped) or a connection to its socket that
// the audit hook does not see. Only native code makes one: ctypes
// (stopped when the script's own code calls it), or a C extension of an
// allowed library that connects to a name the script chooses (none is
// known); the runner answers no other process, so a child or another
// program cannot. The tokens are then in the runner alone: under
// IsolateRoot the script is another uid and the runner is root; under
// IsolateUserNS it has no /proc and ptracing the runner (its caller's uid)
// needs native code and a kernel that lets a process trace other than
// its descendants (Yama's ptrace_scope 0); under sandbox.IsolateNone a
// script runs as the host's uid, and a process it starts (no audit hook
// there) can read the runner's memory where the kernel allows it (no
// Yama). Reading the process's own memory finds no token before its
// marker: the guard and the static check keep the script out of it
// anyway (numpy builds an array over any address an object's
// __array_interface__ names; the guard closes the dicts of scikit-learn
// and scipy that serve their keys as attributes, another object of an
// allowed library whose attributes the script names at run time could
// serve one). A marker's line reached through code that does the
// stage's work badly (a model whose fit does nothing) earns its credit:
// a marker says a line ran, not that the work was good. Markers inside a
// function that runs in another process (a joblib worker) print nothing
// there: the runner answers the script's process only.
//
// Where the markers go (instrument.py, through the task interpreter's own
// ast and tokenize modules):
//
//   - With the built-in section comments: imports_done, data_loaded,
//     model_defined and model_trained after the "# === end imports|data|
//     model|training ===" footers; predictions_made after the last
//     statement of the evaluate section calling .predict/.predict_proba/
//     .predict_log_proba/.decision_function; submission_written after its
//     last .to_csv/savetxt statement (else after "# === end evaluate ===").
//   - Otherwise, by AST heuristics over the module, every function body and
//     the `if __name__ == "__main__":` block: after the last top-level
//     import; after the last statement (in the block of the first one)
//     calling read_csv/read_*/load/load_*/fetch_*/loadtxt...; after the
//     last assignment, before the first .fit(, of the name .fit is called
//     on (else after the first CapWord-constructor assignment); after the
//     last statement calling .fit(; then predictions and submission as
//     above over the whole script.
//
// A marker is one whole line after a whole statement (a compound one such
// as a for loop counts as a whole), at that statement's indentation, so
// the program computes exactly what it did: the marker writes with
// os.write(1, ...) (unaffected by print shadowing, redirect_stdout or
// sys.stdout replacement) and [ParseMarkers] removes exactly the bytes it
// wrote. Marker lines end in "# mlerl:inserted", which the sandbox uses to
// keep tracebacks on the line numbers of the agent's file.

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mlerl/mlerl/internal/llm"
)

//go:embed instrument.py
var instrumentPy string

// Marker names, in the order a training script reaches them.
const (
	MarkerImportsDone       = "imports_done"
	MarkerDataLoaded        = "data_loaded"
	MarkerModelDefined      = "model_defined"
	MarkerModelTrained      = "model_trained"
	MarkerPredictionsMade   = "predictions_made"
	MarkerSubmissionWritten = "submission_written"
)

// MarkerNames lists every marker in stage order.
var MarkerNames = []string{MarkerImportsDone, MarkerDataLoaded, MarkerModelDefined, MarkerModelTrained, MarkerPredictionsMade, MarkerSubmissionWritten}

// insertedMark ends every marker line; the sandbox keys on it.
const insertedMark = "# mlerl:inserted"

// instrumentTimeout bounds one call of the Python instrumenter.
const instrumentTimeout = 20 * time.Second

var nonceRe = regexp.MustCompile(`^[0-9A-Za-z]{8,64}$`)

// NewNonce returns a fresh 128-bit nonce (32 hex digits) from crypto/rand.
func NewNonce() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("env: crypto/rand failed: " + err.Error()) // the OS has no entropy source: nothing can run safely
	}
	return hex.EncodeToString(b[:])
}

// markerLine is the canonical marker statement at indent: the sandbox's
// __mlerl_mark__ prints the marker's line (MarkLines) when it runs.
func markerLine(indent, name string) string {
	return fmt.Sprintf(`%s__mlerl_mark__(%d)  %s`, indent, markerIndex(name), insertedMark)
}

func markerIndex(name string) int {
	for i, m := range MarkerNames {
		if m == name {
			return i
		}
	}
	return -1
}

// MarkerToken is marker name's token in the execution of nonce: 32 hex
// digits of HMAC-SHA256 keyed by the nonce, so that one marker's token
// tells nothing of another's, nor of the nonce.
func MarkerToken(nonce, name string) string {
	m := hmac.New(sha256.New, []byte(nonce))
	m.Write([]byte(name))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// MarkLines returns the lines the markers of an execution of nonce print,
// in MarkerNames' order: sandbox.Request.Marks of an instrumented run.
func MarkLines(nonce string) []string {
	out := make([]string, len(MarkerNames))
	for i, m := range MarkerNames {
		out[i] = "@@MLERL " + MarkerToken(nonce, m) + " " + m + "@@\n"
	}
	return out
}

// NoCreditError is the instrumenter's refusal of a script that could print
// markers it did not reach (see the file comment): the script runs as
// written and earns no partial credit.
type NoCreditError struct {
	// Why names the line and what on it ("line 3: eval can read or run
	// code behind the instrumentation's back").
	Why string
}

func (e *NoCreditError) Error() string { return "no partial credit: " + e.Why }

// StaticInstrumenter is the default [Instrumenter]: [Instrument] and
// [ParseMarkers].
type StaticInstrumenter struct{}

// MarkLines calls the package-level [MarkLines].
func (StaticInstrumenter) MarkLines(nonce string) []string { return MarkLines(nonce) }

// Instrument calls the package-level [Instrument].
func (StaticInstrumenter) Instrument(ctx context.Context, python string, source []byte, nonce string) ([]byte, error) {
	return Instrument(ctx, python, source, nonce)
}

// ParseMarkers calls the package-level [ParseMarkers].
func (StaticInstrumenter) ParseMarkers(stdout, nonce string) ([]string, string) {
	return ParseMarkers(stdout, nonce)
}

// NoInstrumenter runs scripts as written and credits no markers
// (Config.Instrument false: the partial-credit ablation). Lines a script
// prints that look like markers stay in its output.
type NoInstrumenter struct{}

// Instrument returns source unchanged.
func (NoInstrumenter) Instrument(_ context.Context, _ string, source []byte, _ string) ([]byte, error) {
	return source, nil
}

// ParseMarkers finds no markers.
func (NoInstrumenter) ParseMarkers(stdout, _ string) ([]string, string) { return nil, stdout }

// Instrument returns source with marker lines inserted (see the file
// comment for where), using python's ast module in a long-lived helper
// process (one per interpreter, started on first use). Every line of
// source is kept byte for byte; a source python cannot parse is an error
// (run it as written: it fails with its own syntax error), and so is one
// the credit check refuses (a *[NoCreditError]). The markers print their
// lines only where the sandbox runs the result with MarkLines(nonce).
func Instrument(ctx context.Context, python string, source []byte, nonce string) ([]byte, error) {
	if !nonceRe.MatchString(nonce) {
		return nil, fmt.Errorf("env: instrument: nonce %q must be 8-64 letters or digits", nonce)
	}
	if !utf8.Valid(source) {
		return nil, errors.New("env: instrument: the script is not valid UTF-8")
	}
	resp, err := helperFor(python).call(ctx, map[string]string{"source": string(source)})
	if err != nil {
		return nil, err
	}
	if !resp.Credit {
		return nil, &NoCreditError{Why: resp.Why}
	}
	return []byte(resp.Source), nil
}

// CreditCheck runs the static credit check alone: nil when source may
// earn markers, else a *[NoCreditError].
func CreditCheck(ctx context.Context, python string, source []byte) error {
	resp, err := helperFor(python).call(ctx, map[string]string{"op": "credit", "source": string(source)})
	if err != nil {
		return err
	}
	if !resp.Credit {
		return &NoCreditError{Why: resp.Why}
	}
	return nil
}

// ParseMarkers returns the markers of the execution of nonce found in
// stdout (each with its own [MarkerToken]), each once, in the order first
// reached, and stdout with exactly the bytes the markers wrote removed.
// Marker-like text without a token or with an unknown name is not a
// marker and stays in the output. A complete marker whose token is wrong
// (a guess) stays too, and voids every marker of the run: markers is nil.
func ParseMarkers(stdout, nonce string) (markers []string, clean string) {
	if nonce == "" {
		return nil, stdout
	}
	const prefix = "@@MLERL "
	tokens := map[string]string{}
	for _, m := range MarkerNames {
		tokens[m] = MarkerToken(nonce, m)
	}
	seen := map[string]bool{}
	forged := false
	var b strings.Builder
	rest := stdout
	for {
		i := strings.Index(rest, prefix)
		if i < 0 {
			b.WriteString(rest)
			break
		}
		after := rest[i+len(prefix):]
		tok, tail, ok1 := strings.Cut(after, " ")
		name, _, ok2 := strings.Cut(tail, "@@")
		if !ok1 || !ok2 || !isMarkerName(name) || !tokenRe.MatchString(tok) {
			b.WriteString(rest[:i+len(prefix)])
			rest = after
			continue
		}
		if tok != tokens[name] {
			forged = true
			b.WriteString(rest[:i+len(prefix)])
			rest = after
			continue
		}
		b.WriteString(rest[:i])
		rest = strings.TrimPrefix(tail[len(name)+2:], "\n")
		if !seen[name] {
			seen[name] = true
			markers = append(markers, name)
		}
	}
	if forged {
		markers = nil
	}
	return markers, b.String()
}

// tokenRe matches a marker token (MarkerToken's form).
var tokenRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

func isMarkerName(s string) bool {
	for _, m := range MarkerNames {
		if s == m {
			return true
		}
	}
	return false
}

// helperResponse is one answer of instrument.py.
type helperResponse struct {
	Source   string  `json:"source"`
	Inserted [][]any `json:"inserted"`
	Credit   bool    `json:"credit"`
	Why      string  `json:"why"`
	Error    string  `json:"error"`
}

// instrHelper is one `python -c instrument.py` process answering one JSON
// line per request; calls are serialised (each takes milliseconds).
type instrHelper struct {
	python string
	mu     sync.Mutex
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
}

var (
	helpersMu sync.Mutex
	helpers   = map[string]*instrHelper{}
)

func helperFor(python string) *instrHelper {
	helpersMu.Lock()
	defer helpersMu.Unlock()
	h := helpers[python]
	if h == nil {
		h = &instrHelper{python: python}
		helpers[python] = h
	}
	return h
}

func (h *instrHelper) start() error {
	cmd := exec.Command(h.python, "-s", "-E", "-c", instrumentPy)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "PYTHONIOENCODING=utf-8"}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("env: start instrumenter %s: %w", h.python, err)
	}
	h.cmd, h.in, h.out = cmd, in, bufio.NewReaderSize(out, 1<<16)
	return nil
}

// stop kills the helper; the next call starts a new one.
func (h *instrHelper) stop() {
	if h.cmd != nil {
		h.cmd.Process.Kill()
		h.cmd.Wait()
		h.cmd = nil
	}
}

func (h *instrHelper) call(ctx context.Context, req any) (*helperResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		if err := h.start(); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	type answer struct {
		line []byte
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		if _, err := h.in.Write(append(b, '\n')); err != nil {
			done <- answer{err: err}
			return
		}
		line, err := h.out.ReadBytes('\n')
		done <- answer{line, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, instrumentTimeout)
	defer cancel()
	select {
	case a := <-done:
		if a.err != nil {
			h.stop()
			return nil, fmt.Errorf("env: instrumenter process: %w", a.err)
		}
		var resp helperResponse
		if err := json.Unmarshal(a.line, &resp); err != nil {
			h.stop()
			return nil, fmt.Errorf("env: instrumenter answer: %w", err)
		}
		if resp.Error != "" {
			return nil, fmt.Errorf("env: instrument: %s", resp.Error)
		}
		return &resp, nil
	case <-ctx.Done():
		h.stop()
		<-done
		return nil, fmt.Errorf("env: instrument: %w", ctx.Err())
	}
}

// LLMInstrumenter asks a chat model to insert the marker prints. Its
// answer is accepted only if it differs from the script by inserted marker
// lines alone (a line diff; each inserted line must be a print of
// "@@MLERL <nonce> <marker>@@" with a known marker); accepted lines are
// rewritten to the canonical marker statement and the result must
// compile. A rejected answer is an error, or, with Fallback, the static
// instrumenter's result. A script the credit check refuses is a
// *[NoCreditError] before the model is asked.
type LLMInstrumenter struct {
	Client   *llm.Client
	Fallback bool
}

const instrumenterSystemPrompt = `You instrument Python machine-learning training scripts for progress tracking.
Insert marker print lines and change nothing else: keep every existing line exactly as it is, add no other code, remove nothing.
Each marker line is exactly print("@@MLERL <nonce> <marker>@@") with the given nonce, on a line of its own, indented like the statement it follows.
Markers, each inserted once where that stage is complete: imports_done (after the imports), data_loaded (after the data is loaded and prepared), model_defined (after the model is constructed), model_trained (after training/fitting), predictions_made (after test predictions are computed), submission_written (after the submission file is written).
Answer with the complete instrumented script in one python code block.`

// MarkLines calls the package-level [MarkLines].
func (LLMInstrumenter) MarkLines(nonce string) []string { return MarkLines(nonce) }

// Instrument returns the model's instrumented script, verified.
func (li LLMInstrumenter) Instrument(ctx context.Context, python string, source []byte, nonce string) ([]byte, error) {
	if err := CreditCheck(ctx, python, source); err != nil {
		return nil, err
	}
	out, err := li.instrument(ctx, python, source, nonce)
	if err != nil && li.Fallback && ctx.Err() == nil {
		return Instrument(ctx, python, source, nonce)
	}
	return out, err
}

func (li LLMInstrumenter) instrument(ctx context.Context, python string, source []byte, nonce string) ([]byte, error) {
	if li.Client == nil {
		return nil, errors.New("env: LLM instrumenter: no client")
	}
	if !nonceRe.MatchString(nonce) {
		return nil, fmt.Errorf("env: instrument: nonce %q must be 8-64 letters or digits", nonce)
	}
	temp := 0.0
	resp, err := li.Client.Chat(ctx, llm.ChatRequest{
		Messages: []llm.Message{
			{Role: "system", Content: instrumenterSystemPrompt},
			{Role: "user", Content: fmt.Sprintf("Nonce: %s\n\nScript:\n```python\n%s```", nonce, source)},
		},
		Temperature: &temp,
	})
	if err != nil {
		return nil, fmt.Errorf("env: LLM instrumenter: %w", err)
	}
	code, ok := extractCode(resp.Content)
	if !ok {
		return nil, errors.New("env: LLM instrumenter: the answer has no code block")
	}
	out, err := CheckInserted(source, []byte(code), nonce)
	if err != nil {
		return nil, err
	}
	if _, err := helperFor(python).call(ctx, map[string]string{"op": "check", "source": string(out)}); err != nil {
		return nil, fmt.Errorf("env: LLM instrumenter: the instrumented script does not compile: %w", err)
	}
	return out, nil
}

// ParseMarkers calls the package-level [ParseMarkers].
func (LLMInstrumenter) ParseMarkers(stdout, nonce string) ([]string, string) {
	return ParseMarkers(stdout, nonce)
}

// llmMarkerRe matches one marker print an LLM may insert.
var llmMarkerRe = regexp.MustCompile(`^([ \t]*)print\(\s*(?:"@@MLERL ([0-9A-Za-z]+) (\w+)@@"|'@@MLERL ([0-9A-Za-z]+) (\w+)@@')\s*(?:,\s*flush\s*=\s*True\s*)?\)\s*$`)

// CheckInserted verifies that got is orig with marker lines inserted and
// nothing else changed (line by line, ignoring only a trailing newline at
// the very end), and returns orig with those markers in canonical form.
// The error names the first offending line of got.
func CheckInserted(orig, got []byte, nonce string) ([]byte, error) {
	a := instrLines(string(orig))
	b := instrLines(string(got))
	var out strings.Builder
	i := 0
	for j, line := range b {
		if i < len(a) && strings.TrimRight(line, "\r\n") == strings.TrimRight(a[i], "\r\n") {
			out.WriteString(a[i])
			if !strings.HasSuffix(a[i], "\n") && j+1 < len(b) {
				out.WriteString("\n")
			}
			i++
			continue
		}
		m := llmMarkerRe.FindStringSubmatch(strings.TrimRight(line, "\r\n"))
		if m == nil {
			if i < len(a) {
				return nil, fmt.Errorf("env: LLM instrumenter changed the script: line %d is %q where line %d of the original is %q", j+1, strings.TrimSpace(line), i+1, strings.TrimSpace(a[i]))
			}
			return nil, fmt.Errorf("env: LLM instrumenter changed the script: line %d %q is not a marker print", j+1, strings.TrimSpace(line))
		}
		n, name := m[2]+m[4], m[3]+m[5]
		if n != nonce {
			return nil, fmt.Errorf("env: LLM instrumenter: line %d carries nonce %q, not this execution's", j+1, n)
		}
		if !isMarkerName(name) {
			return nil, fmt.Errorf("env: LLM instrumenter: line %d: unknown marker %q", j+1, name)
		}
		out.WriteString(markerLine(m[1], name) + "\n")
	}
	if i < len(a) {
		return nil, fmt.Errorf("env: LLM instrumenter dropped the script's lines from line %d (%q) on", i+1, strings.TrimSpace(a[i]))
	}
	return []byte(out.String()), nil
}

// instrLines splits s into lines with their endings, as Python numbers them.
func instrLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			out = append(out, s)
			break
		}
		end := i + 1
		if s[i] == '\r' && end < len(s) && s[end] == '\n' {
			end++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}
