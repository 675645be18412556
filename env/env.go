package env

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/safefile"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// Outcome classifies how one step ended. Every step has exactly one.
type Outcome string

// Outcome classes.
const (
	// OutcomeSuccess: the action was carried out (for Execute Script: the
	// script ran and its submission was graded valid).
	OutcomeSuccess Outcome = "success"
	// OutcomeFormatError: the response did not parse (see [FormatError]).
	OutcomeFormatError Outcome = "format_error"
	// OutcomeInvalidAction: the action parsed but was refused: a path that
	// escapes the workspace or does not exist, a line range outside the
	// file, nothing to undo, a non-Python script...
	OutcomeInvalidAction Outcome = "invalid_action"
	// OutcomeInvalidEdit: Edit Script (AI) could not carry out the instruction.
	OutcomeInvalidEdit Outcome = "invalid_edit"
	// OutcomeEditorError: the editor backend failed (network, no code block).
	OutcomeEditorError Outcome = "editor_error"
	// Execute Script outcomes from the sandbox.
	OutcomeScriptError Outcome = "script_error"
	OutcomeTimeout     Outcome = "timeout"
	OutcomeOOM         Outcome = "oom"
	OutcomeKilled      Outcome = "killed"
	OutcomeOutputLimit Outcome = "output_limit"
	// OutcomeInvalidSubmission: the script exited cleanly but submission.csv
	// is missing or the grader refused it.
	OutcomeInvalidSubmission Outcome = "invalid_submission"
)

// Accepted reports whether the environment carried out an action with
// this outcome: it parsed, was not refused, and an edit's instruction was
// one the editor could carry out. Format errors, refused actions and
// invalid edits (an instruction the offline editor does not know, or an
// idea that does not apply to the script) are not accepted, the three
// outcomes the reward's format term punishes; a script that failed or a
// refused submission are (the action itself was valid, its result bad).
func Accepted(o Outcome) bool {
	return o != OutcomeFormatError && o != OutcomeInvalidAction && o != OutcomeInvalidEdit
}

// Outcomes lists every outcome class.
func Outcomes() []Outcome {
	return []Outcome{OutcomeSuccess, OutcomeFormatError, OutcomeInvalidAction, OutcomeInvalidEdit, OutcomeEditorError,
		OutcomeScriptError, OutcomeTimeout, OutcomeOOM, OutcomeKilled, OutcomeOutputLimit, OutcomeInvalidSubmission}
}

// Reasons an episode ends.
const (
	DoneFinalAnswer = "final_answer"
	DoneMaxSteps    = "max_steps"
	DoneTimeLimit   = "time_limit"
)

// killOutputFactor: an execution is stopped once it has printed this many
// times Config.MaxOutputBytes (stdout and stderr together): far more than
// is kept, so that a chatty script is not cut short, but bounded.
const killOutputFactor = 64

// SubmissionFile is the file a script writes in its workspace.
const SubmissionFile = "submission.csv"

// ErrDone is returned by Step once the episode has ended.
var ErrDone = errors.New("env: the episode has ended")

// Instrumenter inserts nonce-tagged marker prints into a script before it
// runs and finds them in its output afterwards (see instrument.go).
type Instrumenter interface {
	Instrument(ctx context.Context, python string, source []byte, nonce string) ([]byte, error)
	// ParseMarkers returns the markers found (in order) and stdout without
	// the marker lines.
	ParseMarkers(stdout, nonce string) (markers []string, clean string)
}

// Config configures environments. Start from [DefaultConfig]; the fields
// tagged yaml:"-" are run-time dependencies set by the caller.
type Config struct {
	MaxSteps         int           `yaml:"max_steps" help:"steps per episode (a format error counts as a step)"`
	MaxTime          time.Duration `yaml:"max_time" help:"wall time per episode (steps plus time added with AddTime)"`
	ObservationChars int           `yaml:"observation_chars" help:"observations longer than this keep their head and tail"`
	MemoryBytes      int64         `yaml:"memory_bytes" help:"memory limit of one script execution"`
	MaxProcs         int           `yaml:"max_procs" help:"process-count limit of one script execution"`
	CPUs             float64       `yaml:"cpus" help:"CPU cores one script execution may use at once, all its processes together (a cgroup quota where one can be made)"`
	MaxOutputBytes   int           `yaml:"max_output_bytes" help:"output kept per stream (stdout, stderr) from one execution"`
	MaxFileBytes     int64         `yaml:"max_file_bytes" help:"largest file one script execution may write (RLIMIT_FSIZE; also capped at the workspace quota)"`
	// WorkspaceBytes and WorkspaceFiles bound a workspace, the task's own
	// files included: a script run that leaves it over either is killed
	// (outcome killed, reward -1 plus its markers, like a fork bomb) and
	// what it added is removed; Copy File and edits that would pass them
	// are refused; a snapshot over them is not kept. A task's task.yaml
	// may set its own (workspace_bytes, workspace_files).
	WorkspaceBytes int64         `yaml:"workspace_bytes" help:"bytes a workspace may hold, task files included: a script run over it is killed and what it added removed, a copy or edit past it refused, a snapshot over it not kept (task.yaml's workspace_bytes overrides it per task)"`
	WorkspaceFiles int           `yaml:"workspace_files" help:"files and folders a workspace may hold (task.yaml's workspace_files overrides it per task); as workspace_bytes"`
	GradeTimeout   time.Duration `yaml:"grade_timeout" help:"time limit of one grader run"`
	Python         string        `yaml:"python" help:"task interpreter (empty: /usr/bin/python3 or python3 on PATH)"`
	WorkDir        string        `yaml:"work_dir" help:"parent folder of episode workspaces (empty: the system temp folder)"`
	// ExecuteAfterEdit makes a successful edit of a .py file also run it
	// (like Execute Script) in the same step, so that the edit's own reward
	// carries the measured improvement: useful for step-wise RL, where each
	// sampled state takes one action. Off: MLAgentBench semantics.
	ExecuteAfterEdit bool `yaml:"execute_after_edit" help:"run the script right after a successful edit of it, in the same step"`
	// ExecuteAfterUndo makes a successful Undo Edit Script of a .py file
	// also run the restored script in the same step, so that the undo's
	// own reward carries the measured recovery (step-wise RL: a one-step
	// episode never reaches the Execute Script that would be credited
	// otherwise). Off: MLAgentBench semantics.
	ExecuteAfterUndo bool `yaml:"execute_after_undo" help:"run the restored script right after a successful undo of it, in the same step"`
	// LastStepEdits offers edits and undos to a constrained policy on an
	// episode's last step too. Off (the default), the action grammar
	// leaves them out there whenever they cannot change the score the
	// episode ends with ([Env.ScoreFixed]): without ExecuteAfterEdit an
	// edit on the last step is never run, and the episode is scored on
	// the last run's submission (issue 49: run 15's policies spent their
	// last steps on such edits).
	LastStepEdits bool `yaml:"last_step_edits" help:"offer Edit Script (AI), Edit Script Segment and Undo Edit Script to a constrained-decoding policy on an episode's last step (max_steps) even where they cannot change the score; false (the default): the action grammar leaves an edit out there unless execute_after_edit runs it, and an undo unless execute_after_undo does"`
	// Instrument inserts the partial-credit markers before each execution
	// (the static instrumenter unless Instrumenter is set); off, scripts
	// run as written and no marker is ever credited.
	Instrument bool         `yaml:"instrument" help:"insert partial-credit markers before each execution (off: scripts run as written, no marker credit)"`
	Reward     RewardConfig `yaml:"reward"`
	// EditorKind names the editor a stage gives the environment (Editor):
	// the offline catalog editor, or an LLM on the stage's llm endpoint
	// (rollout and evaluate), which can edit any script, the original
	// unsectioned ones of `initial: original` tasks included.
	EditorKind string `yaml:"editor" help:"who carries out Edit Script (AI): offline (the idea catalog's edits of a sectioned train.py) or llm (the stage's llm endpoint; rollout and evaluate; needed for initial: original tasks)"`
	// ExecCacheOn makes the stages share an [ExecCache] across their
	// episodes (NewExecCacheFor): a script run on a workspace equal to an
	// earlier run's is replayed instead of run again.
	ExecCacheOn bool `yaml:"exec_cache" help:"replay a script run whose script, files and limits equal an earlier run's in this stage (success and script errors only; its files, output and duration are replayed) instead of running it again"`
	// Feedback is what the agent is told of the hidden-test score of its
	// submissions: the public part's score after each run (public, the
	// default: a Kaggle public leaderboard), or only whether the
	// submission was valid (none: MLE-bench shows no test score). Rewards
	// use the public part's score either way.
	Feedback string `yaml:"feedback" help:"what the agent is told of its hidden-test scores: public (the public part's score after every run, as a Kaggle public leaderboard) or none (only whether the submission is valid, as MLE-bench); rewards use the public part's score either way"`
	// ExecCacheTimeouts makes the cache keep timed-out runs too. Off by
	// default: a timeout depends on the machine's load, and replaying one
	// assumes the same run would time out again.
	ExecCacheTimeouts bool `yaml:"exec_cache_timeouts" help:"with exec_cache: replay a timed-out run too (its duration is the limit), assuming that the same script on the same files would time out again; off by default, since a timeout depends on the machine's load"`

	// Runner executes scripts; the caller owns and closes it. Nil: each
	// Env starts its own cold runner (sandbox.NewCold) and closes it in
	// Close. Share one warm runner (sandbox.NewWarm) across envs for speed.
	Runner sandbox.Runner `yaml:"-"`
	// Editor carries out Edit Script (AI) (nil: the offline catalog editor).
	Editor Editor `yaml:"-"`
	// ExecCache, when set, replays runs equal to earlier ones (see
	// ExecCacheOn); share one across a stage's episodes.
	ExecCache *ExecCache `yaml:"-"`
	// Instrumenter adds partial-credit markers (nil: [StaticInstrumenter]
	// when Instrument is set, else [NoInstrumenter]).
	Instrumenter Instrumenter `yaml:"-"`
	// FileLLM, when set, answers Understand File; otherwise a
	// deterministic summary is returned.
	FileLLM *llm.Client `yaml:"-"`
	// Blobs, when set, counts what snapshots add to the blob store (and
	// the states refused for their size); share one across a stage.
	Blobs *BlobMeter `yaml:"-"`
}

// DefaultConfig returns 15 steps and 30 minutes per episode (ML-Agent),
// 8,000-character observations, 4 GiB / 64 processes / 1 CPU core / 1 MiB
// of output per execution, files of at most 2 GiB, workspaces of at most
// 1 GiB and 10,000 files and folders (sandbox.DefaultLimits), a 2-minute
// grader limit and
// [DefaultRewardConfig].
func DefaultConfig() Config {
	return Config{
		MaxSteps:         15,
		MaxTime:          30 * time.Minute,
		ObservationChars: 8000,
		MemoryBytes:      4 << 30,
		MaxProcs:         64,
		CPUs:             1,
		MaxOutputBytes:   1 << 20,
		MaxFileBytes:     sandbox.DefaultLimits().MaxFileBytes,
		WorkspaceBytes:   sandbox.DefaultLimits().WorkspaceBytes,
		WorkspaceFiles:   sandbox.DefaultLimits().WorkspaceFiles,
		GradeTimeout:     2 * time.Minute,
		Instrument:       true,
		Reward:           DefaultRewardConfig(),
		EditorKind:       EditorOffline,
		ExecCacheOn:      true,
		Feedback:         FeedbackPublic,
	}
}

// What the agent is told of its hidden-test scores (Config.Feedback).
const (
	FeedbackPublic = "public"
	FeedbackNone   = "none"
)

// Editor kinds (Config.EditorKind).
const (
	EditorOffline = "offline"
	EditorLLM     = "llm"
)

// Validate checks the settings; New and Restore call it. Keys in errors
// are relative ("max_steps"); a stage config nests them under its own
// key with config.Nest ("env.max_steps").
func (c Config) Validate() error {
	switch {
	case c.MaxSteps <= 0:
		return config.Errorf("max_steps", c.MaxSteps, "must be positive")
	case c.MaxTime <= 0:
		return config.Errorf("max_time", c.MaxTime, "must be positive")
	case c.ObservationChars < 0:
		return config.Errorf("observation_chars", c.ObservationChars, "must not be negative (0: no limit)")
	case c.MemoryBytes <= 0:
		return config.Errorf("memory_bytes", c.MemoryBytes, "must be positive (bytes: 4294967296 is 4 GiB)")
	case c.MaxProcs <= 0:
		return config.Errorf("max_procs", c.MaxProcs, "must be positive")
	case c.MaxOutputBytes <= 0:
		return config.Errorf("max_output_bytes", c.MaxOutputBytes, "must be positive")
	case c.MaxFileBytes <= 0:
		return config.Errorf("max_file_bytes", c.MaxFileBytes, "must be positive (bytes: 2147483648 is 2 GiB)")
	case c.WorkspaceBytes <= 0:
		return config.Errorf("workspace_bytes", c.WorkspaceBytes, "must be positive (bytes: 1073741824 is 1 GiB)")
	case c.WorkspaceFiles <= 0:
		return config.Errorf("workspace_files", c.WorkspaceFiles, "must be positive")
	case c.GradeTimeout <= 0:
		return config.Errorf("grade_timeout", c.GradeTimeout, "must be positive")
	case c.EditorKind != "" && c.EditorKind != EditorOffline && c.EditorKind != EditorLLM:
		return config.Errorf("editor", c.EditorKind, "want %s or %s", EditorOffline, EditorLLM)
	case c.Feedback != "" && c.Feedback != FeedbackPublic && c.Feedback != FeedbackNone:
		return config.Errorf("feedback", c.Feedback, "want %s (the public part's score after every run) or %s (only whether the submission is valid)", FeedbackPublic, FeedbackNone)
	}
	return config.Nest("reward", c.Reward.Validate())
}

// Spec is what an environment needs from a task (a schemas.Task row).
type Spec struct {
	TaskID      string `json:"task_id"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Modality    string `json:"modality"`
	TaskType    string `json:"task_type"`
	Metric      string `json:"metric"`
	Direction   string `json:"direction"`
	// MInit is the grader's score of the initial submission (m_init) and
	// MBest the best human-achievable score: the improvement's scale. For
	// a task with a public and a private part of its hidden answers they
	// are the public part's: what the agent is told and rewards use.
	MInit float64 `json:"m_init"`
	MBest float64 `json:"m_best"`
	// MInitPrivate and MBestPrivate are the private part's (nil for a task
	// without parts): never shown to the agent, they start the private
	// score evaluation reports.
	MInitPrivate *float64 `json:"m_init_private,omitempty"`
	MBestPrivate *float64 `json:"m_best_private,omitempty"`
	// TimeLimit bounds one execution.
	TimeLimit time.Duration `json:"time_limit"`
	// WorkspaceTree and PrivateTree are blob trees in the environment's store.
	WorkspaceTree string `json:"workspace_tree"`
	PrivateTree   string `json:"private_tree"`
	// Initial is the task's schemas.Task.Initial: InitialOriginal tasks
	// need an editor other than the offline one.
	Initial string `json:"initial,omitempty"`
	// WorkspaceBytes and WorkspaceFiles, when positive, are the task's own
	// workspace quota (task.yaml), in place of Config's.
	WorkspaceBytes int64 `json:"workspace_bytes,omitempty"`
	WorkspaceFiles int   `json:"workspace_files,omitempty"`
}

// SpecFromTask takes a Spec from a tasks row. Rewards compare grader
// scores on the public part of the hidden answers (all of them for a task
// ingested without parts), so MInit and MBest are the public part's.
func SpecFromTask(t schemas.Task) Spec {
	mInit, mBest := t.Public()
	s := Spec{
		TaskID: t.TaskID, Title: t.Title, Description: t.Description, Modality: t.Modality, TaskType: t.TaskType,
		Metric: t.Metric, Direction: t.Direction, MInit: mInit, MBest: mBest,
		TimeLimit:     time.Duration(t.TimeLimitS * float64(time.Second)),
		WorkspaceTree: t.WorkspaceTree, PrivateTree: t.PrivateTree, Initial: t.Initial,
		WorkspaceBytes: t.WorkspaceBytes, WorkspaceFiles: int(t.WorkspaceFiles),
	}
	if t.HasParts() {
		pi, pb := t.Private()
		s.MInitPrivate, s.MBestPrivate = &pi, &pb
	}
	return s
}

// HeadroomShare is the share of a task's headroom a final score closed:
// (final - m_init) / (m_best - m_init), clipped to [-1, 1] (the sign of
// m_best - m_init carries the metric's direction). ok is false when the
// task has no headroom (m_best equal to m_init, or not finite). Unlike
// delta_r, relative to m_init, it is bounded per task, so one task with
// a tiny m_init cannot decide a mean over tasks.
func HeadroomShare(mInit, mBest, final float64) (float64, bool) {
	room := mBest - mInit
	if room == 0 || math.IsNaN(room) || math.IsInf(room, 0) || math.IsNaN(final) {
		return 0, false
	}
	return max(-1, min(1, (final-mInit)/room)), true
}

// Validate checks a Spec.
func (s Spec) Validate() error {
	switch {
	case s.TaskID == "":
		return errors.New("task spec: no task_id")
	case s.Direction != schemas.HigherIsBetter && s.Direction != schemas.LowerIsBetter:
		return fmt.Errorf("task %s: direction %q (want %q or %q)", s.TaskID, s.Direction, schemas.HigherIsBetter, schemas.LowerIsBetter)
	case s.TimeLimit <= 0:
		return fmt.Errorf("task %s: time limit %v must be positive", s.TaskID, s.TimeLimit)
	case s.WorkspaceTree == "" || s.PrivateTree == "":
		return fmt.Errorf("task %s: no workspace or private tree (ingest the task first)", s.TaskID)
	case math.IsNaN(s.MInit) || math.IsNaN(s.MBest):
		return fmt.Errorf("task %s: m_init or m_best is NaN", s.TaskID)
	case s.WorkspaceBytes < 0 || s.WorkspaceFiles < 0:
		return fmt.Errorf("task %s: workspace quota %d bytes, %d files must not be negative (0: the stage's)", s.TaskID, s.WorkspaceBytes, s.WorkspaceFiles)
	}
	return nil
}

// HistoryEntry records one step.
type HistoryEntry struct {
	Step        int      `json:"step"`
	ActionText  string   `json:"action_text"`
	ActionName  string   `json:"action_name,omitempty"`
	Observation string   `json:"observation"`
	Outcome     Outcome  `json:"outcome"`
	Reward      float64  `json:"reward"`
	MetricAfter *float64 `json:"metric_after,omitempty"`
}

// state is everything a snapshot must carry besides the workspace files.
type state struct {
	Spec    Spec          `json:"spec"`
	Steps   int           `json:"steps"`
	Elapsed time.Duration `json:"elapsed"`
	// Current is the score of the current submission (m_prev), starting at
	// m_init; Best the best graded score so far (nil before any).
	Current float64  `json:"current"`
	Best    *float64 `json:"best,omitempty"`
	// CurrentPrivate and BestPrivate are the private part's scores of the
	// same two submissions (nil for a task without parts): kept for
	// evaluation's records, never shown to the agent or used by rewards.
	CurrentPrivate *float64 `json:"current_private,omitempty"`
	BestPrivate    *float64 `json:"best_private,omitempty"`
	// Base is the score the next edited run's improvement is measured
	// from: the score of the last graded run that followed an edit (m_init
	// before any), raised by any later run of the unchanged workspace that
	// scored better, never lowered by one. A re-run of an unchanged
	// workspace moves Current (the standing submission) whichever way it
	// goes, but a script whose score varies from run to run cannot bank a
	// low unedited re-run as the baseline of its next edit (a one-character
	// edit would then earn the headroom again, every cycle). Nil
	// (snapshots made before it): Current.
	Base *float64 `json:"base,omitempty"`
	// Edited: the workspace changed since the last graded run.
	Edited     bool           `json:"edited"`
	History    []HistoryEntry `json:"history"`
	Done       bool           `json:"done"`
	DoneReason string         `json:"done_reason,omitempty"`
	// backups per file, oldest first; nil entries mean "did not exist".
	Backups map[string][]*[]byte `json:"-"`
}

// Env is one episode's environment. It is not safe for concurrent use.
// After Step returns an error the Env should be closed (or restored from
// a snapshot): its state may be partly updated.
type Env struct {
	cfg     Config
	st      store.Store
	ownRun  bool   // cfg.Runner was started by this Env
	dir     string // the workspace
	s       state
	private blobs.Files // loaded on first grade

	// Snapshot caches: blob hashes known to be in st, and workspace file
	// hashes by size and mtime.
	mu     sync.Mutex
	stored map[string]bool
	hashes map[string]hashEntry
}

// StepResult is what one step did.
type StepResult struct {
	Step int // 1-based index of this step in the episode
	// Action is the parsed action (nil on a format error, then FormatError is set).
	Action      *Action
	FormatError *FormatError
	Observation string // what the agent reads next (truncated)
	Outcome     Outcome
	// Detail says why an action was refused or failed (for logs).
	Detail string
	// MetricBefore is the current score (m_prev) before the step;
	// MetricAfter the grader's score of the new submission (Execute Script
	// with a valid submission only); BestBefore the best score so far.
	MetricBefore float64
	MetricAfter  *float64
	BestBefore   *float64
	// ValMetric is the VAL_METRIC value the script printed (informational:
	// the agent can forge it, rewards never use it).
	ValMetric *float64
	Markers   []string
	Reward    Reward
	// ExecDuration is the script's (or editor's) run time; WallDuration
	// the whole step. A run replayed from Config.ExecCache (ExecCached)
	// reports the original run's time in both.
	ExecDuration time.Duration
	WallDuration time.Duration
	ExecCached   bool
	Usage        llm.Usage // editor / file-LLM tokens
	// Executed reports whether the step ran a script (Execute Script, or an
	// edit with Config.ExecuteAfterEdit) past the refusal checks.
	Executed   bool
	Done       bool
	DoneReason string

	editedBeforeRun bool          // the workspace had changed since the last graded run
	baseBefore      float64       // the improvement's baseline before the step (state.Base)
	idle            bool          // a timeout of a run that waited rather than computed (idleTimeout)
	saved           string        // the file an edit wrote, or an undo restored
	unchanged       bool          // an edit left its file as it was
	replayCredit    time.Duration // a replayed run's original time less the replay's
}

// New starts an episode: it checks the spec and materialises the task's
// workspace tree from st into a fresh folder under cfg.WorkDir. Close the
// Env to remove it.
func New(ctx context.Context, cfg Config, spec Spec, st store.Store) (*Env, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	e := &Env{cfg: cfg, st: st, s: state{Spec: spec, Current: spec.MInit, Base: copyPtr(&spec.MInit), CurrentPrivate: copyPtr(spec.MInitPrivate), Backups: map[string][]*[]byte{}}}
	if err := e.init(); err != nil {
		return nil, err
	}
	files, tree, err := blobs.GetTree(ctx, st, spec.WorkspaceTree)
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("task %s workspace: %w", spec.TaskID, err)
	}
	if err := e.materialise(files, tree); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) init() error {
	if err := e.cfg.Validate(); err != nil {
		return config.Nest("env", err)
	}
	if e.cfg.Editor == nil {
		if e.cfg.EditorKind == EditorLLM {
			return config.Nest("env", config.Errorf("editor", e.cfg.EditorKind, "this stage gives the environment no LLM client (only rollout and evaluate have an llm endpoint)"))
		}
		e.cfg.Editor = OfflineEditor{}
	}
	if _, offline := e.cfg.Editor.(OfflineEditor); offline && e.s.Spec.Initial == schemas.InitialOriginal {
		return fmt.Errorf("task %s: its train.py is the benchmark's own (task.yaml initial: %s), without the sections the offline editor's catalog edits need: run with --env.editor %s and an llm endpoint (--llm.base_url), or re-import the task with --initial %s",
			e.s.Spec.TaskID, schemas.InitialOriginal, EditorLLM, schemas.InitialGenerated)
	}
	if e.cfg.Instrumenter == nil {
		e.cfg.Instrumenter = NoInstrumenter{}
		if e.cfg.Instrument {
			e.cfg.Instrumenter = StaticInstrumenter{}
		}
	}
	if e.cfg.Python == "" {
		p, err := sandbox.FindPython("")
		if err != nil {
			return err
		}
		e.cfg.Python = p
	}
	if e.cfg.Runner == nil {
		e.cfg.Runner = sandbox.NewCold(e.cfg.Python)
		e.ownRun = true
	}
	return nil
}

// materialise writes a tree's files into a fresh workspace folder.
func (e *Env) materialise(files blobs.Files, tree *blobs.Tree) error {
	e.stored = map[string]bool{}
	for _, en := range tree.Entries {
		e.stored[en.Hash] = true
	}
	sweepStale(e.cfg.WorkDir) // what killed processes left (workspace.go)
	dir, err := os.MkdirTemp(e.cfg.WorkDir, workspacePattern(e.s.Spec.TaskID))
	if err != nil {
		return fmt.Errorf("env: workspace folder: %w", err)
	}
	if err := blobs.WriteDir(dir, files); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("env: task %s workspace: %w", e.s.Spec.TaskID, err)
	}
	e.dir = dir
	if u, err := e.usage(); err != nil || e.quota().Exceeded(u) != "" {
		os.RemoveAll(dir)
		e.dir = ""
		if err != nil {
			return fmt.Errorf("env: task %s workspace: %w", e.s.Spec.TaskID, err)
		}
		return fmt.Errorf("env: task %s: its workspace holds %s, over the quota: raise %s", e.s.Spec.TaskID, e.quota().Exceeded(u), e.quotaKeys())
	}
	return nil
}

// Close removes the workspace folder.
func (e *Env) Close() error {
	if e.ownRun {
		e.cfg.Runner.Close()
		e.ownRun = false
	}
	if e.dir == "" {
		return nil
	}
	err := os.RemoveAll(e.dir)
	e.dir = ""
	return err
}

// Dir returns the workspace folder.
func (e *Env) Dir() string { return e.dir }

// Undoable lists, sorted, the files with an edit that Undo Edit Script
// can take back (empty, not nil, when there is none).
func (e *Env) Undoable() []string {
	out := []string{}
	for f, stack := range e.s.Backups {
		if len(stack) > 0 {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// ScoreFixed reports whether an edit (Edit Script (AI), Edit Script
// Segment) or an undo taken as the next step can no longer change the
// score the episode ends with, so that an agent choosing among offered
// actions (a policy under the action grammar) is not offered it: the step
// is the last that max_steps allows, and the environment does not run the
// script after that action (execute_after_edit, execute_after_undo), so
// the submission standing at the end is the last run's whatever the
// action does. A time limit cannot be foreseen and does not count. Both
// are false once the episode has ended, and with last_step_edits.
func (e *Env) ScoreFixed() (edit, undo bool) {
	if e.s.Done || e.cfg.LastStepEdits || e.s.Steps+1 < e.cfg.MaxSteps {
		return false, false
	}
	return !e.cfg.ExecuteAfterEdit, !e.cfg.ExecuteAfterUndo
}

// Files lists the workspace's regular files (slash-separated paths,
// sorted), as List Files would show them one folder at a time; links and
// other special files a script left are not listed.
func (e *Env) Files() []string {
	var out []string
	filepath.WalkDir(e.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if rel, err := filepath.Rel(e.dir, p); err == nil {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// Spec returns the task spec.
func (e *Env) Spec() Spec { return e.s.Spec }

// Steps returns the number of steps taken.
func (e *Env) Steps() int { return e.s.Steps }

// Current returns the score of the current submission (m_init before any graded run).
func (e *Env) Current() float64 { return e.s.Current }

// PrivateScores returns the private part's scores of the current
// submission and of the best one so far (nil for a task without parts,
// best nil before any graded run). Evaluation records them; nothing an
// agent reads may show them.
func (e *Env) PrivateScores() (current, best *float64) {
	return copyPtr(e.s.CurrentPrivate), copyPtr(e.s.BestPrivate)
}

// Feedback is what the agent is told of its hidden-test scores
// (Config.Feedback: FeedbackPublic or FeedbackNone).
func (e *Env) Feedback() string {
	if e.cfg.Feedback == "" {
		return FeedbackPublic
	}
	return e.cfg.Feedback
}

// Best returns the best graded score so far, if any.
func (e *Env) Best() (float64, bool) {
	if e.s.Best == nil {
		return 0, false
	}
	return *e.s.Best, true
}

// History returns the steps so far (the caller must not modify it).
func (e *Env) History() []HistoryEntry { return e.s.History }

// Done reports whether the episode has ended, and why.
func (e *Env) Done() (bool, string) { return e.s.Done, e.s.DoneReason }

// AddTime counts time spent outside Step (the agent's thinking) towards
// the episode's time limit.
func (e *Env) AddTime(d time.Duration) {
	e.s.Elapsed += d
	if !e.s.Done && e.s.Elapsed >= e.cfg.MaxTime {
		e.s.Done, e.s.DoneReason = true, DoneTimeLimit
	}
}

// Step parses the agent's response, carries out the action and returns
// what happened. Bad responses and refused actions are outcomes, not
// errors; an error means the environment itself failed (store, grader,
// runner, cancelled context). After the episode ends Step returns ErrDone.
func (e *Env) Step(ctx context.Context, actionText string) (StepResult, error) {
	if e.s.Done {
		return StepResult{}, ErrDone
	}
	start := time.Now()
	e.s.Steps++
	r := StepResult{Step: e.s.Steps, MetricBefore: e.s.Current, BestBefore: copyPtr(e.s.Best), baseBefore: e.base()}
	a, err := Parse(actionText)
	if err != nil {
		var fe *FormatError
		if !errors.As(err, &fe) {
			return r, err
		}
		r.FormatError = fe
		r.Outcome = OutcomeFormatError
		r.Detail = fe.Error()
		r.Observation = "Your response could not be parsed: " + fe.Error() + ".\nAnswer with the fields Reflection, Thought, Action and Action Input (a JSON object with the action's arguments)."
	} else {
		r.Action = &a
		if err := e.do(ctx, a, &r); err != nil {
			return r, err
		}
	}
	r.Observation = truncateMiddle(r.Observation, e.cfg.ObservationChars)
	r.Reward = ComputeReward(e.cfg.Reward, RewardInput{
		Outcome: r.Outcome, Executed: r.Executed, Edited: r.editedBeforeRun,
		Prev: r.MetricBefore, Base: &r.baseBefore, New: r.MetricAfter,
		MInit: e.s.Spec.MInit, MBest: e.s.Spec.MBest, Direction: e.s.Spec.Direction,
		Markers:     len(r.Markers),
		FinalAnswer: r.Action != nil && r.Action.Name == FinalAnswer && r.Outcome == OutcomeSuccess, Best: r.BestBefore,
		UnchangedEdit: r.unchanged && r.Outcome == OutcomeSuccess,
		IdleTimeout:   r.idle,
	})
	r.WallDuration = time.Since(start) + r.replayCredit
	e.s.Elapsed += r.WallDuration
	h := HistoryEntry{Step: r.Step, ActionText: actionText, Observation: r.Observation, Outcome: r.Outcome, Reward: r.Reward.Total, MetricAfter: copyPtr(r.MetricAfter)}
	if r.Action != nil {
		h.ActionName = r.Action.Name
	}
	e.s.History = append(e.s.History, h)
	switch {
	case r.Action != nil && r.Action.Name == FinalAnswer:
		e.s.Done, e.s.DoneReason = true, DoneFinalAnswer
	case e.s.Steps >= e.cfg.MaxSteps:
		e.s.Done, e.s.DoneReason = true, DoneMaxSteps
	case e.s.Elapsed >= e.cfg.MaxTime:
		e.s.Done, e.s.DoneReason = true, DoneTimeLimit
	}
	if e.s.Done && (e.s.DoneReason == DoneMaxSteps || e.s.DoneReason == DoneTimeLimit) {
		in := RewardInput{MInit: e.s.Spec.MInit, MBest: e.s.Spec.MBest, Direction: e.s.Spec.Direction}
		if t, ok := LimitTerm(e.cfg.Reward, in, e.s.Current, e.s.Best); ok {
			r.Reward.Terms = append(r.Reward.Terms, t)
			r.Reward.Total += t.Value
			e.s.History[len(e.s.History)-1].Reward = r.Reward.Total
		}
	}
	r.Done, r.DoneReason = e.s.Done, e.s.DoneReason
	return r, nil
}

// Settle runs script when the workspace has changed since the last
// graded run (an edit is pending), outside the episode: no step is
// counted, nothing enters the history and no time is charged. A valid
// submission becomes the current score (and the best, when better), and
// the edit is no longer pending; any other result leaves the state as it
// was. It reports whether the state changed. Step-wise RL settles an
// expert state before the policy acts in it, so that an Execute Script
// of the expert's pending edit is not credited with that edit's gain.
func (e *Env) Settle(ctx context.Context, script string) (bool, error) {
	if e.s.Done || !e.s.Edited {
		return false, nil
	}
	var r StepResult
	saved := e.s
	err := e.execute(ctx, Action{Name: ExecuteScript, ScriptName: script}, &r)
	var rf *refusal
	if errors.As(err, &rf) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if r.Outcome != OutcomeSuccess {
		e.s = saved
		return false, nil
	}
	return true, nil
}

// refusal is an action the env will not carry out (outcome invalid_action).
type refusal struct {
	msg   string
	cause error // what made it (errors.Is looks through), if anything
}

func (r *refusal) Error() string { return r.msg }

func (r *refusal) Unwrap() error { return r.cause }

func refuse(format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...)}
}

// do carries out a parsed action, filling r.
func (e *Env) do(ctx context.Context, a Action, r *StepResult) error {
	var err error
	switch a.Name {
	case ListFiles:
		err = e.listFiles(a, r)
	case UnderstandFile:
		err = e.understandFile(ctx, a, r)
	case InspectScriptLines:
		err = e.inspect(a, r)
	case EditScriptSegment, EditScriptAI:
		if a.Name == EditScriptSegment {
			err = e.editSegment(a, r)
		} else {
			err = e.editAI(ctx, a, r)
		}
		if err == nil && e.cfg.ExecuteAfterEdit && r.saved != "" && strings.HasSuffix(r.saved, ".py") {
			diff := r.Observation
			if err = e.execute(ctx, Action{Name: ExecuteScript, ScriptName: r.saved}, r); err == nil {
				r.Observation = diff + "\n\n" + r.Observation
			}
		}
	case ExecuteScript:
		err = e.execute(ctx, a, r)
	case UndoEditScript:
		err = e.undo(a, r)
		if err == nil && e.cfg.ExecuteAfterUndo && r.saved != "" && strings.HasSuffix(r.saved, ".py") {
			undone := r.Observation
			if err = e.execute(ctx, Action{Name: ExecuteScript, ScriptName: r.saved}, r); err == nil {
				r.Observation = undone + "\n\n" + r.Observation
			}
		}
	case CopyFile:
		err = e.copyFile(a, r)
	case FinalAnswer:
		r.Outcome = OutcomeSuccess
		r.Observation = "Final answer submitted. The episode has ended."
	default:
		err = refuse("unknown action %q", a.Name)
	}
	var rf *refusal
	if errors.As(err, &rf) {
		r.Outcome = OutcomeInvalidAction
		r.Detail = rf.msg
		r.Observation = "The action was refused: " + rf.msg + "."
		return nil
	}
	return err
}

// execute runs a script: instrument with a fresh nonce, run in the
// sandbox, collect markers, grade the submission.
func (e *Env) execute(ctx context.Context, a Action, r *StepResult) error {
	rel, abs, err := e.resolve(a.ScriptName)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(rel, ".py") {
		return refuse("%s is not a Python script (Execute Script runs .py files)", rel)
	}
	src, err := e.readFile(rel, abs)
	if err != nil {
		return err
	}
	r.Executed = true
	r.editedBeforeRun = e.s.Edited
	// A stale submission must not be graded as this run's.
	if err := os.Remove(filepath.Join(e.dir, SubmissionFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("env: remove old submission: %w", err)
	}
	nonce := NewNonce()
	timeout := e.s.Spec.TimeLimit
	if left := e.cfg.MaxTime - e.s.Elapsed; left < timeout {
		timeout = max(left, time.Second)
	}
	// The script is killed past killOutputBytes of output; the message
	// below says so with the same numbers.
	keptOutput := e.cfg.MaxOutputBytes
	if keptOutput <= 0 {
		keptOutput = sandbox.DefaultLimits().MaxOutputBytes
	}
	killOutputBytes := killOutputFactor * int64(keptOutput)
	q := e.quota()
	limits := sandbox.Limits{Timeout: timeout, MemoryBytes: e.cfg.MemoryBytes, MaxProcs: e.cfg.MaxProcs, CPUs: e.cfg.CPUs,
		MaxOutputBytes: keptOutput, KillOutputBytes: killOutputBytes, MaxFileBytes: e.cfg.MaxFileBytes, WorkspaceBytes: q.Bytes, WorkspaceFiles: q.Files}
	req, noCredit, err := e.instrument(ctx, rel, src, nonce, limits)
	if err != nil {
		return err
	}
	do := func() (sandbox.Result, error) { return e.cfg.Runner.Run(ctx, req) }
	var res sandbox.Result
	if c := e.cfg.ExecCache; c != nil {
		t0 := time.Now()
		res, nonce, r.ExecCached, err = c.run(ctx, execRun{dir: e.dir, script: rel, source: src, limits: limits,
			python: e.cfg.Python, instr: instrumenterKind(e.cfg.Instrumenter), nonce: nonce}, do)
		if r.ExecCached {
			// Charge the episode the time the run took when it ran.
			r.replayCredit = max(res.Duration-time.Since(t0), 0)
		}
	} else {
		res, err = do()
	}
	if err != nil {
		return fmt.Errorf("env: execute %s: %w", rel, err)
	}
	r.ExecDuration = res.Duration
	var stdout string
	r.Markers, stdout = e.cfg.Instrumenter.ParseMarkers(res.Stdout, nonce)
	r.ValMetric = parseValMetric(stdout)
	var obs strings.Builder
	obs.WriteString("The script has been executed. Here is the output:\n")
	obs.WriteString(stdout)
	if res.Stderr != "" {
		if !strings.HasSuffix(stdout, "\n") && stdout != "" {
			obs.WriteString("\n")
		}
		obs.WriteString(res.Stderr)
	}
	switch res.Outcome {
	case sandbox.Success:
		g, err := e.grade(ctx)
		if err != nil {
			return err
		}
		if !g.Valid {
			r.Outcome = OutcomeInvalidSubmission
			r.Detail = g.Reason
			fmt.Fprintf(&obs, "\nThe script finished but %s is not a valid submission: %s", SubmissionFile, g.Reason)
			break
		}
		r.Outcome = OutcomeSuccess
		// With parts, everything the agent reads and the reward use the
		// public part's score; the private part's is only kept.
		score, private := g.Score, (*float64)(nil)
		if g.HasParts() {
			score, private = *g.Public, copyPtr(g.Private)
		}
		r.MetricAfter = &score
		e.s.Current, e.s.CurrentPrivate = score, private
		if e.s.Edited || e.better(score, e.base()) {
			e.s.Base = copyPtr(&score)
		}
		if e.s.Best == nil || e.better(score, *e.s.Best) {
			e.s.Best, e.s.BestPrivate = &score, copyPtr(private)
		}
		e.s.Edited = false
		if e.Feedback() == FeedbackNone {
			fmt.Fprintf(&obs, "\n%s is a valid submission (its score on the hidden test set is not shown).", SubmissionFile)
		}
	case sandbox.ScriptError:
		r.Outcome = OutcomeScriptError
		r.Detail = fmt.Sprintf("exit code %d", res.ExitCode)
	case sandbox.Timeout:
		r.Outcome = OutcomeTimeout
		r.Detail = fmt.Sprintf("no result within %v", timeout)
		fmt.Fprintf(&obs, "\nThe script was stopped after the time limit of %v.", timeout.Round(time.Second))
		if idleTimeout(res) {
			r.idle = true
			r.Detail += fmt.Sprintf(", idle (CPU time %v)", res.CPUTime.Round(time.Millisecond))
			fmt.Fprintf(&obs, " It spent that time waiting, not computing (%v of CPU time): a run that sleeps out its time limit is not the timeout the reward excuses, and counts as a failed run.", res.CPUTime.Round(time.Millisecond))
		}
	case sandbox.OOM:
		r.Outcome = OutcomeOOM
		r.Detail = "out of memory"
		fmt.Fprintf(&obs, "\nThe script ran out of memory (limit %d MiB).", e.cfg.MemoryBytes>>20)
	case sandbox.OutputLimit:
		r.Outcome = OutcomeOutputLimit
		r.Detail = "output limit"
		fmt.Fprintf(&obs, "\nThe script was stopped: it printed more than %s (stdout and stderr together); of each stream only the first and last %s were kept.",
			safefile.Bytes(killOutputBytes), safefile.Bytes(int64(keptOutput/2)))
	default:
		r.Outcome = OutcomeKilled
		if res.Reason != "" {
			r.Detail = "killed: " + res.Reason
			fmt.Fprintf(&obs, "\nThe script was killed by the sandbox: %s.", res.Reason)
			break
		}
		r.Detail = fmt.Sprintf("killed (%s)", res.Outcome)
		obs.WriteString("\nThe script was killed by the sandbox (a resource limit was exceeded).")
	}
	if noCredit != nil {
		fmt.Fprintf(&obs, "\n(No partial credit for this run, %s: a script that could print markers it did not reach runs without them.)", noCredit.Why)
	}
	r.Observation = obs.String()
	return nil
}

// idleShare: a timed-out run whose CPU time is under this share of its
// wall time spent it waiting (time.sleep, a blocking read, a join on
// nothing), not computing.
const idleShare = 0.05

// idleTimeout reports whether a timed-out run was idle: a script that
// sleeps out its time limit on purpose, to earn the timeout's corner-case
// 0 in place of a failed run's -1 (and, with duration-aware weighting,
// the largest weight of its batch). Judged only where the sandbox counted
// every process of the run (a CPU cgroup: Result.CPUs > 0), so that
// workers a script waits for, killed unreaped at the limit, are not
// missed; a computing run held to its cores uses nearly all its wall
// time. A script that busy-loops instead still times out as the corner
// case: it cannot be told from a slow honest run by its resources.
func idleTimeout(res sandbox.Result) bool {
	return res.Outcome == sandbox.Timeout && res.CPUs > 0 && res.Duration > 0 &&
		res.CPUTime.Seconds() < idleShare*res.CPUs*res.Duration.Seconds()
}

// instrument makes the sandbox request of an execution: the script with
// its markers (and the lines they print) when the instrumenter accepts
// it, else as written (noCredit says why a script was refused credit; a
// script the instrumenter cannot parse fails with its own syntax error).
func (e *Env) instrument(ctx context.Context, rel string, src []byte, nonce string, limits sandbox.Limits) (sandbox.Request, *NoCreditError, error) {
	req := sandbox.Request{Dir: e.dir, Script: rel, Source: src, Limits: limits}
	inst, err := e.cfg.Instrumenter.Instrument(ctx, e.cfg.Python, src, nonce)
	var noCredit *NoCreditError
	switch {
	case err == nil:
		req.Source = inst
		if m, ok := e.cfg.Instrumenter.(interface{ MarkLines(string) []string }); ok {
			req.Marks = m.MarkLines(nonce)
		}
	case ctx.Err() != nil:
		return req, nil, ctx.Err()
	case errors.As(err, &noCredit):
	}
	return req, noCredit, nil
}

// base is the score the next edited run's improvement is measured from
// (state.Base).
func (e *Env) base() float64 {
	if e.s.Base != nil {
		return *e.s.Base
	}
	return e.s.Current
}

func (e *Env) better(a, b float64) bool {
	if e.s.Spec.Direction == schemas.LowerIsBetter {
		return a < b
	}
	return a > b
}

// valMetricRe matches the metric line every built-in script prints.
var valMetricRe = regexp.MustCompile(`(?m)^VAL_METRIC \S+ (\S+)\s*$`)

// parseValMetric returns the last VAL_METRIC value printed, if any.
func parseValMetric(stdout string) *float64 {
	m := valMetricRe.FindAllStringSubmatch(stdout, -1)
	if len(m) == 0 {
		return nil
	}
	v, err := strconv.ParseFloat(m[len(m)-1][1], 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func copyPtr(p *float64) *float64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// truncateMiddle keeps a quarter of the limit from the head and the rest
// from the tail (errors are at the end of a script's output).
func truncateMiddle(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	head := n / 4
	tail := n - head
	// Cut between characters, never inside one: a script's output in any
	// script (and a name it printed) must not leave half a UTF-8 sequence
	// in the observation, which the prompt, the steps dataset and
	// serve-env's JSON would each mangle their own way.
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	from := len(s) - tail
	for from < len(s) && !utf8.RuneStart(s[from]) {
		from++
	}
	return s[:head] + fmt.Sprintf("\n...[%d characters cut]...\n", from-head) + s[from:]
}

func safeName(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteRune(c)
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}
