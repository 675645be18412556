// Package serve is `mlerl serve-env`: an HTTP server that exposes the
// environment and its reward to trainers outside this binary (verl on a
// GPU cluster, through scripts/verl_reward.py).
//
// A trainer POSTs one action for one expert state to /v1/step; the server
// restores the state's snapshot into a fresh sandboxed workspace, carries
// the action out, and answers the reward terms, the outcome, the
// execution time and the observation. The states come from an rl_states
// dataset loaded at start (by state_id), or a request names a snapshot
// directly. Every request but /healthz carries the bearer token when one
// is set (token_file or MLERL_SERVE_TOKEN; auth.go), and a non-loopback
// address needs one. Start at [Run]; [New] builds the handler for tests. The
// script runner is set up once, as rollout and evaluate set theirs
// (env/episode's Setup).
package serve

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// Config is serve-env's configuration.
type Config struct {
	Data            string        `yaml:"data" help:"data root holding the states' snapshots (local path or gs://bucket/prefix)"`
	RLStates        string        `yaml:"rl_states" help:"rl_states dataset whose state ids requests name (name, or name/vN; empty: requests must give snapshot_ref)"`
	Addr            string        `yaml:"addr" help:"listen address (host:port; :8080 listens on every interface)"`
	Concurrency     int           `yaml:"concurrency" help:"actions executed at once (0: one per core)"`
	Queue           int           `yaml:"queue" help:"requests that may wait for a free slot; more are refused with 429"`
	RequestTimeout  time.Duration `yaml:"request_timeout" help:"limit of one request, waiting included (a running script is killed)"`
	MaxBodyBytes    int64         `yaml:"max_body_bytes" help:"largest request body accepted (413 above)"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" help:"on SIGTERM, how long in-flight requests may take to finish"`
	Warm            bool          `yaml:"warm" help:"run scripts in the warm Python worker (falls back to cold processes)"`
	// TokenFile holds the bearer token every request but /healthz must
	// carry; MLERL_SERVE_TOKEN gives it instead. The token itself is never
	// part of the config (nor printed, nor logged).
	TokenFile      string `yaml:"token_file" help:"file holding the bearer token requests must send (Authorization: Bearer <token>; /healthz stays open); empty: the MLERL_SERVE_TOKEN environment variable, else no token, which is refused on a non-loopback addr"`
	InsecureNoAuth bool   `yaml:"insecure_no_auth" help:"listen on a non-loopback addr without a token: anyone who reaches the port runs code in the sandbox and reads the states (warned at every start)"`
	TLSCert        string `yaml:"tls_cert" help:"PEM certificate (chain) to serve HTTPS with (TLS 1.2 at least); with tls_key"`
	TLSKey         string `yaml:"tls_key" help:"PEM private key of tls_cert"`
	PerClient      int    `yaml:"per_client" help:"requests one client (remote IP) may have running or waiting at once; more get 429 with Retry-After (0: no per-client limit, only the global concurrency and queue)"`

	Env env.Config `yaml:"env"`
}

// TokenEnv is the environment variable that gives serve-env's bearer
// token when no token_file is set.
const TokenEnv = "MLERL_SERVE_TOKEN"

// DefaultConfig returns loopback port 8080, one action per core with 64
// waiting, 10 minutes per request, 1 MiB bodies and the default
// environment (the rollout's reward) with edits executed in the same step,
// as in `mlerl train ppo`: an external step-wise RL trainer sends one action
// per state, so an edit's reward must carry its measured improvement.
func DefaultConfig() Config {
	ecfg := env.DefaultConfig()
	ecfg.ExecuteAfterEdit = true
	return Config{
		Data: "./data", RLStates: "rl_states", Addr: "127.0.0.1:8080",
		Queue: 64, RequestTimeout: 10 * time.Minute, MaxBodyBytes: 1 << 20, ShutdownTimeout: 10 * time.Minute, Warm: true,
		Env: ecfg,
	}
}

// Validate implements config.Validator: every field, before anything is
// read or listened on.
func (c *Config) Validate() error {
	if c.Data == "" {
		return config.Errorf("data", c.Data, "must name the data root (a folder or gs://bucket/prefix)")
	}
	if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "" {
		return config.Errorf("addr", c.Addr, "want host:port, e.g. 127.0.0.1:8080 (:8080 listens on every interface)")
	}
	switch {
	case c.Concurrency < 0:
		return config.Errorf("concurrency", c.Concurrency, "must not be negative (0: one per core)")
	case c.Queue < 0:
		return config.Errorf("queue", c.Queue, "must not be negative")
	case c.RequestTimeout <= 0:
		return config.Errorf("request_timeout", c.RequestTimeout, "must be positive")
	case c.MaxBodyBytes < 1:
		return config.Errorf("max_body_bytes", c.MaxBodyBytes, "must be positive")
	case c.ShutdownTimeout < 0:
		return config.Errorf("shutdown_timeout", c.ShutdownTimeout, "must not be negative")
	case c.PerClient < 0:
		return config.Errorf("per_client", c.PerClient, "must not be negative (0: no per-client limit)")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return config.Errorf("tls_cert", c.TLSCert, "tls_cert and tls_key go together (tls_key %q)", c.TLSKey)
	}
	if c.Env.EditorKind == env.EditorLLM {
		return config.Errorf("env.editor", c.Env.EditorKind, "is not available in serve-env, which has no llm endpoint (use %s)", env.EditorOffline)
	}
	return config.Nest("env", c.Env.Validate())
}

// StepRequest is the body of POST /v1/step. Give state_id (a row of the
// loaded rl_states) or snapshot_ref (a snapshot in the data root); when
// both are given they must agree. Without an rl_states dataset loaded,
// snapshot_ref is required and state_id is only echoed back.
type StepRequest struct {
	StateID     string `json:"state_id,omitempty"`
	SnapshotRef string `json:"snapshot_ref,omitempty"`
	// Action is the policy's whole answer (Reflection, Thought, Action,
	// Action Input); a malformed one is a format error with its reward,
	// not a request error.
	Action string `json:"action"`
}

// StepResponse is the answer of POST /v1/step.
type StepResponse struct {
	StateID     string `json:"state_id,omitempty"`
	SnapshotRef string `json:"snapshot_ref"`
	// Reward is the total; Terms its parts by name.
	Reward float64            `json:"reward"`
	Terms  map[string]float64 `json:"terms"`
	// Outcome is the env's class (success, format_error, script_error...).
	Outcome string `json:"outcome"`
	// DurationS is the execution time of the action (the dt of the
	// duration-aware gradient); WallS the whole request.
	DurationS   float64 `json:"duration_s"`
	WallS       float64 `json:"wall_s"`
	Observation string  `json:"observation"`
	ActionName  string  `json:"action_name,omitempty"`
	// MetricBefore and MetricAfter are the public part's score before the
	// action and after a run (absent when no run scored). Under
	// env.feedback none neither is sent: the observation does not show the
	// score there, and nothing else a client hands the policy may.
	MetricBefore *float64 `json:"metric_before,omitempty"`
	MetricAfter  *float64 `json:"metric_after,omitempty"`
	FormatError  bool     `json:"format_error"`
	Done         bool     `json:"done"`
}

// errorResponse is every error's body.
type errorResponse struct {
	Error string `json:"error"`
}

// Server serves the environment. Build it with [New]; it is an
// http.Handler.
type Server struct {
	cfg    Config
	st     store.Store
	states map[string]schemas.RLState
	source string // the rl_states version, for messages
	envCfg env.Config
	log    *slog.Logger
	token  []byte   // the bearer token requests must carry (nil: none)
	peers  *clients // requests in flight per client (per_client)

	slots    *semaphore.Weighted // one unit per running action, capacity in all
	capacity int64
	running  atomic.Int64 // requests holding a slot
	waiting  atomic.Int64 // requests waiting for a slot
	draining atomic.Bool
	mux      *http.ServeMux

	closeOnce sync.Once
	closeFn   func() error
}

// New opens the data root, loads the rl_states rows into memory and
// starts the script runner. Close releases the runner.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	token, err := loadToken(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkExposure(cfg, token); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, st: st, states: map[string]schemas.RLState{}, log: log, token: token,
		peers: &clients{limit: cfg.PerClient, n: map[string]int{}}}
	if cfg.RLStates != "" {
		m, err := datasets.ResolveIn(ctx, st, cfg.RLStates)
		if err != nil {
			return nil, fmt.Errorf("serve-env: rl_states: %w (set rl_states to an existing dataset, or to \"\" to accept only snapshot_ref)", err)
		}
		rows, err := datasets.ReadAll[schemas.RLState](ctx, st, m, schemas.RLStates)
		if err != nil {
			return nil, err
		}
		for i, r := range rows {
			if r.StateID == "" {
				return nil, fmt.Errorf("serve-env: %s row %d: empty state_id; rebuild it with `mlerl dataset`", m.URI, i)
			}
			s.states[r.StateID] = r
		}
		s.source = fmt.Sprintf("%s v%d", m.Name, m.Version)
	}
	// One runner for every request, with the interpreter set once: an
	// empty one makes every restore probe Python (about 2 s).
	envCfg, stop, err := episode.Setup(ctx, cfg.Env, llm.Config{}, cfg.Warm, func(err error) {
		log.Warn("warm worker unavailable; using cold processes", "err", err.Error())
	})
	if err != nil {
		return nil, err
	}
	s.closeFn, s.envCfg = stop, envCfg
	s.capacity = int64(cfg.Concurrency)
	if s.capacity == 0 {
		s.capacity = int64(runtime.NumCPU())
	}
	s.slots = semaphore.NewWeighted(s.capacity)
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/v1/step", s.handleStep)
	s.mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	s.mux.HandleFunc("/readyz", s.handleReady)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route %s %s: the endpoints are POST /v1/step, GET /healthz and GET /readyz", r.Method, r.URL.Path)
	})
	return s, nil
}

// States returns the number of states loaded.
func (s *Server) States() int { return len(s.states) }

// Close stops the script runner; call it after the HTTP server has
// drained.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() { err = s.closeFn() })
	return err
}

// ServeHTTP logs every request (one JSON line: method, path, status,
// duration, state, outcome) and routes it. A server fault (500) is logged
// at error level with its whole error, a refusal for load or time (503,
// 504, 429) as a warning, the rest (client mistakes included) as info.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	if s.token != nil && r.URL.Path != "/healthz" && !authorized(r, s.token) {
		rec.errMsg = "missing or wrong bearer token"
		rec.Header().Set("WWW-Authenticate", `Bearer realm="mlerl serve-env"`)
		writeError(rec, http.StatusUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <token>, the secret in the server's token_file (or %s)", TokenEnv)
	} else {
		s.mux.ServeHTTP(rec, r)
	}
	attrs := []any{"method", r.Method, "path", r.URL.Path, "status", rec.status, "bytes", rec.bytes,
		"duration_ms", float64(time.Since(start).Microseconds()) / 1000, "remote", r.RemoteAddr}
	if rec.stateID != "" {
		attrs = append(attrs, "state_id", rec.stateID)
	}
	if rec.outcome != "" {
		attrs = append(attrs, "outcome", rec.outcome, "reward", rec.reward)
	}
	if rec.errMsg != "" {
		attrs = append(attrs, "error", rec.errMsg)
	}
	level := slog.LevelInfo
	switch {
	case rec.status == http.StatusInternalServerError:
		level = slog.LevelError
	case rec.status >= 500 || rec.status == http.StatusTooManyRequests:
		level = slog.LevelWarn
	}
	s.log.Log(r.Context(), level, "request", attrs...)
}

// recorder keeps what the access log needs.
type recorder struct {
	http.ResponseWriter
	status  int
	bytes   int
	stateID string
	outcome string
	reward  float64
	errMsg  string
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	n, err := r.ResponseWriter.Write(p)
	r.bytes += n
	return n, err
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "states": len(s.states), "rl_states": s.source,
		"running": s.running.Load(), "capacity": s.capacity, "waiting": s.waiting.Load()})
}

func (s *Server) handleStep(w http.ResponseWriter, r *http.Request) {
	rec, _ := w.(*recorder)
	fail := func(code int, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if rec != nil {
			rec.errMsg = msg
		}
		writeError(w, code, "%s", msg)
	}
	// failErr answers an error from below (the store, the environment):
	// the client reads it without server paths, the log keeps it whole.
	failErr := func(code int, prefix string, err error) {
		if rec != nil {
			rec.errMsg = prefix + err.Error()
		}
		writeError(w, code, "%s", prefix+s.scrub(err.Error()))
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, "%s /v1/step: use POST with a JSON body {\"state_id\": ..., \"action\": ...}", r.Method)
		return
	}
	if s.draining.Load() {
		fail(http.StatusServiceUnavailable, "shutting down; retry on another replica")
		return
	}

	// 1. The request: bounded size, known fields only.
	var req StepRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(http.StatusRequestEntityTooLarge, "request body over %d bytes (max_body_bytes)", s.cfg.MaxBodyBytes)
			return
		}
		fail(http.StatusBadRequest, "bad JSON body: %v; want {\"state_id\": \"...\", \"action\": \"...\"}", err)
		return
	}
	if dec.More() {
		fail(http.StatusBadRequest, "bad JSON body: more than one JSON value")
		return
	}
	if rec != nil {
		rec.stateID = req.StateID
	}

	// 2. The state to restore. A snapshot_ref the client chose must be
	// in the data root (a state's comes from the server's own dataset).
	ref, fromClient, status, err := s.lookup(req)
	if err != nil {
		fail(status, "%v", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	if fromClient {
		switch ok, err := blobs.Exists(ctx, s.st, ref); {
		case err != nil:
			failErr(http.StatusInternalServerError, fmt.Sprintf("snapshot_ref %s: the data root cannot be read: ", ref), err)
			return
		case !ok:
			fail(http.StatusNotFound, "snapshot_ref %s: no such snapshot in the data root; send an rl_states row's snapshot_ref (or its state_id)", ref)
			return
		}
	}

	// 3. A slot: run now, wait in the bounded queue (first come, first
	// served), or refuse; a client over its share is refused first.
	leave, ok := s.peers.enter(r.RemoteAddr)
	if !ok {
		w.Header().Set("Retry-After", "1")
		fail(http.StatusTooManyRequests, "this client already has %d requests running or waiting (per_client); retry later", s.cfg.PerClient)
		return
	}
	defer leave()
	if !s.slots.TryAcquire(1) {
		if s.waiting.Add(1) > int64(s.cfg.Queue) {
			s.waiting.Add(-1)
			w.Header().Set("Retry-After", "1")
			fail(http.StatusTooManyRequests, "busy: %d actions running and %d waiting (concurrency %d, queue %d); retry later", s.capacity, s.cfg.Queue, s.capacity, s.cfg.Queue)
			return
		}
		err := s.slots.Acquire(ctx, 1)
		s.waiting.Add(-1)
		if err != nil {
			fail(http.StatusGatewayTimeout, "timed out after %v waiting for a free slot (request_timeout)", s.cfg.RequestTimeout)
			return
		}
	}
	s.running.Add(1)
	defer func() {
		s.running.Add(-1)
		s.slots.Release(1)
	}()

	// 4. Restore, act, score.
	start := time.Now()
	resp, err := s.step(ctx, ref, req.Action)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			failErr(http.StatusGatewayTimeout, fmt.Sprintf("state %s: timed out after %v (request_timeout): ", label(req), s.cfg.RequestTimeout), err)
		case fromClient && errors.Is(err, env.ErrNotSnapshot):
			failErr(http.StatusUnprocessableEntity, "snapshot_ref ", errors.New(strings.TrimPrefix(err.Error(), "env restore: ")))
		default:
			// The server's own data or machinery failed: a missing blob (of
			// a loaded state, or of a tree that exists), an unreachable
			// store, a sandbox fault.
			failErr(http.StatusInternalServerError, fmt.Sprintf("state %s: environment failed: ", label(req)), err)
		}
		return
	}
	resp.StateID = req.StateID
	resp.WallS = time.Since(start).Seconds()
	if rec != nil {
		rec.outcome, rec.reward = resp.Outcome, resp.Reward
	}
	writeJSON(w, http.StatusOK, resp)
}

func label(req StepRequest) string {
	if req.StateID != "" {
		return req.StateID
	}
	return req.SnapshotRef
}

// lookup finds the snapshot a request names, whether the client chose it
// (a snapshot_ref not checked against a loaded state), or says what is
// wrong with the request and the HTTP status to answer.
func (s *Server) lookup(req StepRequest) (ref string, fromClient bool, status int, err error) {
	if req.SnapshotRef != "" {
		if _, err := blobs.ParseRef(req.SnapshotRef); err != nil {
			return "", false, http.StatusBadRequest, fmt.Errorf("snapshot_ref %q: want \"sha256:<64 hex digits>\" (an rl_states row's snapshot_ref)", req.SnapshotRef)
		}
	}
	if req.StateID == "" {
		if req.SnapshotRef == "" {
			return "", false, http.StatusBadRequest, errors.New("give state_id (an rl_states row) or snapshot_ref")
		}
		return req.SnapshotRef, true, 0, nil
	}
	st, ok := s.states[req.StateID]
	if !ok && s.source == "" && req.SnapshotRef != "" {
		// Snapshot-only mode: the id is the caller's label.
		return req.SnapshotRef, true, 0, nil
	}
	if !ok {
		if s.source == "" {
			return "", false, http.StatusNotFound, fmt.Errorf("unknown state_id %q: no rl_states dataset is loaded (start serve-env with --rl_states, or send snapshot_ref)", req.StateID)
		}
		return "", false, http.StatusNotFound, fmt.Errorf("unknown state_id %q: not in %s (%d states); is the trainer's data from the same dataset version?", req.StateID, s.source, len(s.states))
	}
	if req.SnapshotRef != "" && req.SnapshotRef != st.SnapshotRef {
		return "", false, http.StatusBadRequest, fmt.Errorf("state_id %q has snapshot_ref %s, the request says %s", req.StateID, st.SnapshotRef, req.SnapshotRef)
	}
	if st.SnapshotRef == "" {
		return "", false, http.StatusUnprocessableEntity, fmt.Errorf("state_id %q has no snapshot_ref to restore", req.StateID)
	}
	return st.SnapshotRef, false, 0, nil
}

// absPathRe matches an absolute filesystem path that starts a word.
var absPathRe = regexp.MustCompile(`(^|[\s"'(\[=])(/[^\s"'()\[\]:,;]+)`)

// scrub removes the server's paths from a message a client will read: the
// data root becomes <data>, any other absolute path <path>/ and its last
// element. The client needs what failed, not where the server keeps it;
// the log keeps the whole message.
func (s *Server) scrub(msg string) string {
	if root := s.st.URI(""); root != "" { // absolute, or gs://bucket/prefix
		msg = strings.ReplaceAll(msg, root, "<data>")
	}
	return absPathRe.ReplaceAllStringFunc(msg, func(m string) string {
		sub := absPathRe.FindStringSubmatch(m)
		return sub[1] + "<path>/" + filepath.Base(sub[2])
	})
}

// step restores ref into a fresh workspace, carries the action out there
// and removes the workspace.
func (s *Server) step(ctx context.Context, ref, action string) (*StepResponse, error) {
	r, err := env.StepFrom(ctx, s.envCfg, s.st, ref, action)
	if err != nil {
		return nil, err
	}
	resp := &StepResponse{
		SnapshotRef: ref, Reward: r.Reward.Total, Terms: map[string]float64{}, Outcome: string(r.Outcome),
		DurationS: r.ExecDuration.Seconds(), Observation: r.Observation, FormatError: r.FormatError != nil, Done: r.Done,
	}
	if s.envCfg.Feedback != env.FeedbackNone {
		before := r.MetricBefore
		resp.MetricBefore, resp.MetricAfter = &before, r.MetricAfter
	}
	if r.Action != nil {
		resp.ActionName = r.Action.Name
	}
	for _, t := range r.Reward.Terms {
		resp.Terms[t.Name] += t.Value
	}
	return resp, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, errorResponse{Error: fmt.Sprintf(format, args...)})
}

// Serve answers on ln until ctx is cancelled (SIGTERM in the command), then
// stops accepting, reports not ready, and waits up to ShutdownTimeout for
// in-flight requests before closing the runner.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second, BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.log.Info("shutting down: draining in-flight requests", "running", s.running.Load(), "waiting", s.waiting.Load(), "timeout", s.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("serve-env: shutdown: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

// Run is `mlerl serve-env`: load the states, listen on cfg.Addr and serve
// until ctx is cancelled.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(ctx, cfg, nil)
	if err != nil {
		return err
	}
	tc, err := tlsConfig(cfg)
	if err != nil {
		s.Close()
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		s.Close()
		return fmt.Errorf("serve-env: %w", err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	if s.token == nil && !loopback(cfg.Addr) {
		s.log.Warn("insecure_no_auth: no token on a non-loopback address: anyone who reaches it runs code in the sandbox and reads the states", "addr", cfg.Addr)
	}
	s.log.Info("listening", "addr", ln.Addr().String(), "tls", tc != nil, "auth", s.token != nil, "per_client", cfg.PerClient,
		"states", s.States(), "rl_states", s.source, "concurrency", s.capacity, "queue", cfg.Queue)
	return s.Serve(ctx, ln)
}
