package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/store"
)

func TestStep(t *testing.T) {
	_, ts, logs := testServer(t, func(c *Config) { c.Warm = true })
	cases := []struct {
		name        string
		req         StepRequest
		wantOutcome string
		wantAction  string
		wantObs     string
		wantMetric  bool // metric_after set
		wantFormat  bool
	}{
		{name: "list files by state id", req: StepRequest{StateID: state0.StateID, Action: act(env.ListFiles, ".")},
			wantOutcome: "success", wantAction: env.ListFiles, wantObs: "train.py"},
		{name: "list files by snapshot", req: StepRequest{SnapshotRef: state1.SnapshotRef, Action: act(env.ListFiles, ".")},
			wantOutcome: "success", wantAction: env.ListFiles, wantObs: "train.py"},
		{name: "both ids agreeing", req: StepRequest{StateID: state1.StateID, SnapshotRef: state1.SnapshotRef, Action: act(env.ListFiles, ".")},
			wantOutcome: "success", wantAction: env.ListFiles, wantObs: "train.py"},
		{name: "execute", req: StepRequest{StateID: state1.StateID, Action: act(env.ExecuteScript, "train.py")},
			wantOutcome: "success", wantAction: env.ExecuteScript, wantMetric: true},
		{name: "malformed answer", req: StepRequest{StateID: state0.StateID, Action: "I would like to train a model."},
			wantOutcome: "format_error", wantFormat: true},
		{name: "missing file", req: StepRequest{StateID: state0.StateID, Action: act(env.ExecuteScript, "nope.py")},
			wantOutcome: "invalid_action", wantAction: env.ExecuteScript},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got StepResponse
			if code := post(t, ts.URL, c.req, &got); code != http.StatusOK {
				t.Fatalf("status %d, want 200", code)
			}
			if got.Outcome != c.wantOutcome || got.ActionName != c.wantAction || got.FormatError != c.wantFormat {
				t.Fatalf("got outcome %q action %q format_error %v, want %q %q %v (observation %q)", got.Outcome, got.ActionName, got.FormatError, c.wantOutcome, c.wantAction, c.wantFormat, got.Observation)
			}
			if c.wantObs != "" && !strings.Contains(got.Observation, c.wantObs) {
				t.Errorf("observation %q does not mention %q", got.Observation, c.wantObs)
			}
			if (got.MetricAfter != nil) != c.wantMetric {
				t.Errorf("metric_after %v, want set=%v", got.MetricAfter, c.wantMetric)
			}
			sum := 0.0
			for _, v := range got.Terms {
				sum += v
			}
			if got.Terms == nil || diff(sum, got.Reward) > 1e-9 {
				t.Errorf("terms %v sum to %v, reward %v: want terms summing to the reward", got.Terms, sum, got.Reward)
			}
			if c.wantMetric && got.DurationS <= 0 {
				t.Errorf("duration_s %v for an execution, want > 0", got.DurationS)
			}
			if c.wantFormat && got.Reward >= 0 {
				t.Errorf("a format error earned %v, want a penalty", got.Reward)
			}
			if got.SnapshotRef == "" || got.WallS <= 0 {
				t.Errorf("snapshot_ref %q wall_s %v: want both set", got.SnapshotRef, got.WallS)
			}
		})
	}

	// Each request is a fresh restore: the same action from the same state
	// earns the same reward again.
	var a, b StepResponse
	post(t, ts.URL, StepRequest{StateID: state1.StateID, Action: act(env.ExecuteScript, "train.py")}, &a)
	post(t, ts.URL, StepRequest{StateID: state1.StateID, Action: act(env.ExecuteScript, "train.py")}, &b)
	if a.Reward != b.Reward || a.Outcome != b.Outcome || a.MetricBefore == nil || b.MetricBefore == nil || *a.MetricBefore != *b.MetricBefore {
		t.Errorf("same state and action twice: got %v/%s then %v/%s", a.Reward, a.Outcome, b.Reward, b.Outcome)
	}

	// The access log has one JSON line per request with the state and outcome.
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, state0.StateID) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("access log line %q: %v", l, err)
			}
			break
		}
	}
	if line["path"] != "/v1/step" || line["status"] != float64(200) || line["outcome"] == nil || line["duration_ms"] == nil {
		t.Errorf("access log line %v: want path, status 200, outcome, duration_ms", line)
	}
}

func diff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}

// TestStepErrors: a client's mistake is a 4xx whose message names the
// field and what to send; none names a server path.
func TestStepErrors(t *testing.T) {
	_, ts, _ := testServer(t, func(c *Config) { c.MaxBodyBytes = 4096 })
	listing, err := blobs.GetTreeListing(context.Background(), store.NewLocal(fixture(t)), state0.SnapshotRef)
	if err != nil {
		t.Fatal(err)
	}
	fileRef := blobs.Ref(listing.Entries[0].Hash) // a file of the snapshot, not a tree
	zeros := "sha256:" + strings.Repeat("0", 64)
	cases := []struct {
		name     string
		method   string
		path     string
		body     string
		wantCode int
		wantMsg  string // exactly
	}{
		{name: "unknown state", body: `{"state_id": "nope", "action": "x"}`, wantCode: 404,
			wantMsg: `unknown state_id "nope": not in rl_states v1 (2 states); is the trainer's data from the same dataset version?`},
		{name: "bad json", body: `{"state_id": `, wantCode: 400,
			wantMsg: `bad JSON body: unexpected EOF; want {"state_id": "...", "action": "..."}`},
		{name: "unknown field", body: `{"state": "x", "action": "x"}`, wantCode: 400,
			wantMsg: `bad JSON body: json: unknown field "state"; want {"state_id": "...", "action": "..."}`},
		{name: "two values", body: `{"state_id": "x", "action": "x"} {}`, wantCode: 400, wantMsg: "bad JSON body: more than one JSON value"},
		{name: "no state", body: `{"action": "x"}`, wantCode: 400, wantMsg: "give state_id (an rl_states row) or snapshot_ref"},
		{name: "bad snapshot ref", body: `{"snapshot_ref": "v1/abc", "action": "x"}`, wantCode: 400,
			wantMsg: `snapshot_ref "v1/abc": want "sha256:<64 hex digits>" (an rl_states row's snapshot_ref)`},
		{name: "snapshot ref with a path", body: `{"snapshot_ref": "sha256:` + strings.Repeat("../", 21) + `x", "action": "x"}`, wantCode: 400,
			wantMsg: `snapshot_ref "sha256:` + strings.Repeat("../", 21) + `x": want "sha256:<64 hex digits>" (an rl_states row's snapshot_ref)`},
		{name: "short snapshot ref", body: `{"snapshot_ref": "sha256:abc", "action": "x"}`, wantCode: 400,
			wantMsg: `snapshot_ref "sha256:abc": want "sha256:<64 hex digits>" (an rl_states row's snapshot_ref)`},
		{name: "ids disagree", body: `{"state_id": "` + state0.StateID + `", "snapshot_ref": "` + state1.SnapshotRef + `", "action": "x"}`, wantCode: 400,
			wantMsg: `state_id "` + state0.StateID + `" has snapshot_ref ` + state0.SnapshotRef + `, the request says ` + state1.SnapshotRef},
		{name: "unknown snapshot", body: `{"snapshot_ref": "` + zeros + `", "action": "x"}`, wantCode: 404,
			wantMsg: "snapshot_ref " + zeros + ": no such snapshot in the data root; send an rl_states row's snapshot_ref (or its state_id)"},
		{name: "a file, not a snapshot", body: `{"snapshot_ref": "` + fileRef + `", "action": "x"}`, wantCode: 422,
			wantMsg: "snapshot_ref " + fileRef + ": not a restorable environment snapshot: a blob that is not a tree"},
		{name: "a task's files, not a snapshot", body: `{"snapshot_ref": "` + fixtureTask.WorkspaceTree + `", "action": "x"}`, wantCode: 422,
			wantMsg: "snapshot_ref " + fixtureTask.WorkspaceTree + ": not a restorable environment snapshot: a tree without snapshot metadata (a task's files?)"},
		{name: "too large", body: `{"state_id": "x", "action": "` + strings.Repeat("a", 5000) + `"}`, wantCode: 413, wantMsg: "request body over 4096 bytes (max_body_bytes)"},
		{name: "GET step", method: "GET", wantCode: 405, wantMsg: `GET /v1/step: use POST with a JSON body {"state_id": ..., "action": ...}`},
		{name: "unknown route", method: "GET", path: "/v2/step", wantCode: 404,
			wantMsg: "no route GET /v2/step: the endpoints are POST /v1/step, GET /healthz and GET /readyz"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method, path := c.method, c.path
			if method == "" {
				method = "POST"
			}
			if path == "" {
				path = "/v1/step"
			}
			req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(c.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got errorResponse
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatalf("status %d, body is not a JSON error: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != c.wantCode || got.Error != c.wantMsg {
				t.Fatalf("got %d %q\nwant %d %q", resp.StatusCode, got.Error, c.wantCode, c.wantMsg)
			}
		})
	}
}

// TestServerFaultHidesPaths: a state whose snapshot is missing from the
// server's data root is the server's fault: 500, logged at error level
// with the whole error, and the answer (like every other answer) names no
// server path.
func TestServerFaultHidesPaths(t *testing.T) {
	// A copy of the fixture's data root without state1's snapshot listing.
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS(fixture(t))); err != nil {
		t.Fatal(err)
	}
	h, _ := blobs.ParseRef(state1.SnapshotRef)
	blob := filepath.Join(root, filepath.FromSlash(blobs.Prefix), h)
	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	_, ts, logs := testServer(t, func(c *Config) { c.Data = root })

	var e errorResponse
	code := post(t, ts.URL, StepRequest{StateID: state1.StateID, Action: act(env.ListFiles, ".")}, &e)
	want := "state " + state1.StateID + ": environment failed: env restore: tree " + state1.SnapshotRef + ": <data>/_blobs/sha256/" + h + ": not found"
	if code != http.StatusInternalServerError || e.Error != want {
		t.Errorf("got %d %q\nwant 500 %q", code, e.Error, want)
	}
	var logged map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(l, `"status":500`) {
			json.Unmarshal([]byte(l), &logged)
		}
	}
	if logged["level"] != "ERROR" || !strings.Contains(fmt.Sprint(logged["error"]), blob) {
		t.Errorf("log line %v: want level ERROR and the whole error (with %s)", logged, blob)
	}

	// No answer names the data root, whatever the request.
	bodies := []string{
		`{"state_id": "` + state1.StateID + `", "action": "x"}`,
		`{"state_id": "` + state0.StateID + `", "action": ` + strconv.Quote(act(env.ListFiles, ".")) + `}`,
		`{"state_id": "` + state0.StateID + `", "action": ` + strconv.Quote(act(env.ExecuteScript, "nope.py")) + `}`,
		`{"snapshot_ref": "sha256:` + strings.Repeat("f", 64) + `", "action": "x"}`,
		`{"snapshot_ref": "` + fixtureTask.PrivateTree + `", "action": "x"}`,
		`{"state_id": 1}`,
	}
	for _, b := range bodies {
		resp, err := http.Post(ts.URL+"/v1/step", "application/json", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(raw), root) {
			t.Errorf("%s: answer %d names the data root %s: %s", b, resp.StatusCode, root, raw)
		}
	}
}

func TestScrub(t *testing.T) {
	s := &Server{st: store.NewLocal("/srv/mlerl/data")}
	cases := []struct {
		s    *Server
		in   string
		want string
	}{
		{s, "open /srv/mlerl/data/_blobs/sha256/ab: not found", "open <data>/_blobs/sha256/ab: not found"},
		{s, `stat "/tmp/mlerl-ws-123/train.py": denied`, `stat "<path>/train.py": denied`},
		{s, "sandbox: start /usr/bin/python3: exec format error", "sandbox: start <path>/python3: exec format error"},
		{s, "fetch http://host/v1/x failed", "fetch http://host/v1/x failed"},
	}
	for _, c := range cases {
		if got := c.s.scrub(c.in); got != c.want {
			t.Errorf("scrub(%q): got %q want %q", c.in, got, c.want)
		}
	}
}

func TestHealthAndReady(t *testing.T) {
	s, ts, _ := testServer(t, nil)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: got %d %v, want 200", path, resp.StatusCode, body)
		}
		if path == "/readyz" && body["states"] != float64(2) {
			t.Errorf("/readyz: states %v, want 2", body["states"])
		}
	}
	s.draining.Store(true)
	resp, err := http.Get(ts.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: got %d, want 503", resp.StatusCode)
	}
}

// With every slot taken, one request may wait (queue 1), the next is
// refused with 429, and the waiting one runs once a slot frees.
func TestConcurrencyLimit(t *testing.T) {
	s, ts, _ := testServer(t, func(c *Config) { c.Concurrency, c.Queue = 1, 1 })
	s.slots.TryAcquire(1) // occupy the only slot
	waited := make(chan int, 1)
	go func() {
		var got StepResponse
		waited <- post(t, ts.URL, StepRequest{StateID: state0.StateID, Action: act(env.ListFiles, ".")}, &got)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.waiting.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the request never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var e errorResponse
	if code := post(t, ts.URL, StepRequest{StateID: state0.StateID, Action: act(env.ListFiles, ".")}, &e); code != http.StatusTooManyRequests || !strings.Contains(e.Error, "busy") {
		t.Fatalf("with the slot taken and the queue full: got %d %q, want 429 busy", code, e.Error)
	}
	s.slots.Release(1)
	if code := <-waited; code != http.StatusOK {
		t.Fatalf("queued request: got %d, want 200 once the slot freed", code)
	}
}

func TestRequestTimeout(t *testing.T) {
	s, ts, _ := testServer(t, func(c *Config) { c.Concurrency, c.Queue, c.RequestTimeout = 1, 4, 200*time.Millisecond })
	s.slots.TryAcquire(1)
	defer s.slots.Release(1)
	var e errorResponse
	if code := post(t, ts.URL, StepRequest{StateID: state0.StateID, Action: act(env.ListFiles, ".")}, &e); code != http.StatusGatewayTimeout || !strings.Contains(e.Error, "request_timeout") {
		t.Fatalf("got %d %q, want 504 naming request_timeout", code, e.Error)
	}
}

// Cancelling Serve's context (SIGTERM in the command) lets an in-flight
// execution finish and answer, refuses new work, then returns.
func TestGracefulShutdown(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Data = fixture(t)
	s, err := New(context.Background(), cfg, slogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()

	inflight := make(chan StepResponse, 1)
	codes := make(chan int, 1)
	go func() {
		var got StepResponse
		codes <- post(t, url, StepRequest{StateID: state1.StateID, Action: act(env.ExecuteScript, "train.py")}, &got)
		inflight <- got
	}()
	deadline := time.Now().Add(20 * time.Second)
	for s.running.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never started")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if code := <-codes; code != http.StatusOK {
		t.Fatalf("in-flight request during shutdown: got %d, want 200", code)
	}
	if got := <-inflight; got.Outcome != "success" {
		t.Errorf("in-flight request: outcome %q, want success", got.Outcome)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("the server still accepts connections after shutdown")
	}
}

// TestSymlinkedSubmissionEarnsNothing: the reward hack of a script that
// links submission.csv to the task's hidden answers (here through
// /proc/self/cwd, which needs only the task id: the server runs from the
// repository, where tasks/<id>/private/answers.csv lives) is an invalid
// submission, not a perfect score.
func TestSymlinkedSubmissionEarnsNothing(t *testing.T) {
	_, ts, _ := testServer(t, nil)
	cwd, _ := os.Getwd()
	answers := filepath.Join(repoRoot(), "tasks", testTask, "private", "answers.csv")
	rel, err := filepath.Rel(cwd, answers)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{answers, "/proc/self/cwd/" + rel} {
		code := "import os\nos.symlink(" + strconv.Quote(target) + ", 'submission.csv')\nraise SystemExit(0)\n"
		a := env.Render(env.Action{Reflection: "r", Thought: "t", Name: env.EditScriptSegment, ScriptName: "train.py", StartLine: 1, EndLine: 1, EditText: code})
		var got StepResponse
		if status := post(t, ts.URL, StepRequest{StateID: state0.StateID, Action: a}, &got); status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		if got.Reward > 0 || got.MetricAfter != nil || got.Outcome != string(env.OutcomeInvalidSubmission) {
			t.Errorf("link to %s: outcome %s reward %v metric %v, want an invalid submission and no reward (%s)", target, got.Outcome, got.Reward, got.MetricAfter, got.Observation)
		}
		if !strings.Contains(got.Observation, "symbolic link") {
			t.Errorf("the observation does not say why: %s", got.Observation)
		}
	}
}

// TestStepFeedbackNone: under env.feedback none a run's response carries
// no score (metric_before, metric_after), only its reward and outcome
// (TestStep checks them there under the default).
func TestStepFeedbackNone(t *testing.T) {
	for _, fb := range []string{env.FeedbackNone} {
		t.Run(fb, func(t *testing.T) {
			_, ts, _ := testServer(t, func(c *Config) { c.Env.Feedback = fb })
			resp, err := http.Post(ts.URL+"/v1/step", "application/json", strings.NewReader(mustJSON(t, StepRequest{StateID: state1.StateID, Action: act(env.ExecuteScript, "train.py")})))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var got StepResponse
			if err := json.Unmarshal(body, &got); err != nil || got.Outcome != "success" {
				t.Fatalf("%s %v", body, err)
			}
			hidden := fb == env.FeedbackNone
			if has := strings.Contains(string(body), "metric_before") || strings.Contains(string(body), "metric_after"); has == hidden {
				t.Errorf("feedback %s: the response %s metric_before/metric_after", fb, map[bool]string{true: "has", false: "lacks"}[has])
			}
			if hidden && !strings.Contains(got.Observation, "its score on the hidden test set is not shown") {
				t.Errorf("feedback none: the observation does not say the score is hidden: %s", got.Observation)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
