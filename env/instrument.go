package env

// Instrumentation for partial credit: before a script runs, marker lines
// are inserted at its stage boundaries; each writes "@@MLERL <nonce> <name>@@"
// to stdout when reached. The nonce is fresh per execution and exists only
// in the instrumented copy handed to the sandbox as Request.Source (never in
// the workspace), so text the script prints on its own cannot count.
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
//
// What the nonce does not stop: the script's own code object holds the
// instrumented constants, so a script that introspects itself
// (sys._getframe().f_code.co_consts) could find the nonce and print all
// markers. That takes deliberate self-inspection; markers are worth at
// most 0.6 reward and scores come only from the grader.

import (
	"bufio"
	"context"
	"crypto/rand"
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

// markerLine is the canonical marker statement at indent.
func markerLine(indent, nonce, name string) string {
	return fmt.Sprintf(`%s__import__("os").write(1, b"@@MLERL %s %s@@\n")  %s`, indent, nonce, name, insertedMark)
}

// StaticInstrumenter is the default [Instrumenter]: [Instrument] and
// [ParseMarkers].
type StaticInstrumenter struct{}

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
// (run it as written: it fails with its own syntax error).
func Instrument(ctx context.Context, python string, source []byte, nonce string) ([]byte, error) {
	if !nonceRe.MatchString(nonce) {
		return nil, fmt.Errorf("env: instrument: nonce %q must be 8-64 letters or digits", nonce)
	}
	if !utf8.Valid(source) {
		return nil, errors.New("env: instrument: the script is not valid UTF-8")
	}
	resp, err := helperFor(python).call(ctx, map[string]string{"source": string(source), "nonce": nonce})
	if err != nil {
		return nil, err
	}
	return []byte(resp.Source), nil
}

// ParseMarkers returns the markers nonce-tagged in stdout, each once, in
// the order first reached, and stdout with exactly the bytes the markers
// wrote removed. Marker-like text with another nonce, without one, or with
// an unknown name is not a marker and stays in the output.
func ParseMarkers(stdout, nonce string) (markers []string, clean string) {
	if nonce == "" {
		return nil, stdout
	}
	prefix := "@@MLERL " + nonce + " "
	seen := map[string]bool{}
	var b strings.Builder
	rest := stdout
	for {
		i := strings.Index(rest, prefix)
		if i < 0 {
			b.WriteString(rest)
			break
		}
		after := rest[i+len(prefix):]
		name, _, ok := strings.Cut(after, "@@")
		if !ok || !isMarkerName(name) {
			b.WriteString(rest[:i+len(prefix)])
			rest = after
			continue
		}
		b.WriteString(rest[:i])
		rest = after[len(name)+2:]
		rest = strings.TrimPrefix(rest, "\n")
		if !seen[name] {
			seen[name] = true
			markers = append(markers, name)
		}
	}
	return markers, b.String()
}

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
// instrumenter's result.
type LLMInstrumenter struct {
	Client   *llm.Client
	Fallback bool
}

const instrumenterSystemPrompt = `You instrument Python machine-learning training scripts for progress tracking.
Insert marker print lines and change nothing else: keep every existing line exactly as it is, add no other code, remove nothing.
Each marker line is exactly print("@@MLERL <nonce> <marker>@@") with the given nonce, on a line of its own, indented like the statement it follows.
Markers, each inserted once where that stage is complete: imports_done (after the imports), data_loaded (after the data is loaded and prepared), model_defined (after the model is constructed), model_trained (after training/fitting), predictions_made (after test predictions are computed), submission_written (after the submission file is written).
Answer with the complete instrumented script in one python code block.`

// Instrument returns the model's instrumented script, verified.
func (li LLMInstrumenter) Instrument(ctx context.Context, python string, source []byte, nonce string) ([]byte, error) {
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
		out.WriteString(markerLine(m[1], nonce, name) + "\n")
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
