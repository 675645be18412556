// Package tasks loads and checks ML task folders and runs their graders.
//
// A task is a folder <id>/ holding task.yaml ([Spec]), description.md,
// workspace/ (what the agent sees: data files and train.py) and private/
// (answers.csv and grade.py, never copied into a workspace). Start with
// [Load] (one folder) or [LoadSuite] (every task folder under a root), then
// [ParseValMetric] for the `VAL_METRIC <metric> <value>` line an initial
// script prints, [RunGrader] / [RunGraderIn] (through a sandbox runner) for
// the hidden-label score of a submission, [RunBaseline] for both on the
// initial script, and
// [UploadTrees] / [Materialize] to move a task's trees through a data root's
// blob store.
//
// Errors about a task are [*Error] values naming the task, the file and the
// field, so a caller can report many bad tasks at once and keep the good ones.
package tasks

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/schemas"
)

// File names inside a task folder.
const (
	SpecFile        = "task.yaml"
	DescriptionFile = "description.md"
	WorkspaceDir    = "workspace"
	PrivateDir      = "private"
	ScriptFile      = "train.py"       // in workspace/
	SubmissionFile  = "submission.csv" // written by the script in its working directory
	AnswersFile     = "answers.csv"    // in private/
	GraderFile      = "grade.py"       // in private/
	ValMetricPrefix = "VAL_METRIC"     // the line an initial script prints
)

// ErrInvalid is wrapped by every [*Error].
var ErrInvalid = errors.New("invalid task")

// Error is a fault in one task: which task, which file (relative to the
// task folder) and, when known, which field, plus what to do about it.
type Error struct {
	Task  string // task id, or the folder name when the id is unknown
	File  string // e.g. "task.yaml", "private/grade.py", "workspace/train.py"
	Field string // e.g. "direction"; empty when the fault is the whole file
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "task %s: %s", e.Task, e.File)
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %s", e.Field)
	}
	fmt.Fprintf(&b, ": %s", e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return ErrInvalid }

// Spec is the content of task.yaml. Pointer fields are required; they are
// pointers so that a missing key is told apart from a zero value.
type Spec struct {
	ID        string `yaml:"id"`
	Title     string `yaml:"title"`
	Modality  string `yaml:"modality"`  // tabular, image, text, time-series, graph...
	TaskType  string `yaml:"task_type"` // binary-classification, regression, forecasting...
	Metric    string `yaml:"metric"`    // accuracy, roc_auc, log_loss, rmse, mae, f1_macro...
	Direction string `yaml:"direction"` // higher or lower
	// MBest is task.yaml's m_best when it is a number. The value "measure"
	// (MBestMeasure) asks the ingest stage to measure it with the catalog
	// search (MeasureMBest) and leaves MBest nil until then.
	MBest        *float64 `yaml:"-"`
	MBestMeasure bool     `yaml:"-"`
	MBestSource  string   `yaml:"m_best_source"`
	TimeLimitS   *float64 `yaml:"time_limit_s"` // per execution of the script
	Split        string   `yaml:"split"`        // held-in or held-out
	// SplitRule is optional: the declared rule that chose Split (the
	// built-in suite's "sha256-strata-v1", tasks/README.md); empty when
	// the split was set by hand.
	SplitRule string `yaml:"split_rule,omitempty"`
	// Source is optional: where an imported task came from (mlebench,
	// mlagentbench); empty for the built-in suite.
	Source string `yaml:"source,omitempty"`
	// Initial is optional: what workspace/train.py is, generated (a
	// sectioned script, the default) or original (the benchmark's own,
	// unsectioned: only an LLM editor can edit it, and it need not print
	// a VAL_METRIC line).
	Initial string `yaml:"initial,omitempty"`
	// AnswerSplit and AnswerSplitSeed are optional: the rule that cut the
	// hidden answers into a public and a private part (split.go:
	// SplitStrataHash, SplitTime, or SplitGiven for a private/parts.csv of
	// the author's) and its seed. Empty: DefaultSplitRule of the task type
	// and DefaultSplitSeed.
	AnswerSplit     string `yaml:"answer_split,omitempty"`
	AnswerSplitSeed string `yaml:"answer_split_seed,omitempty"`
	// MBestPublic and MBestPrivate are optional: m_best measured on each
	// part of the hidden answers (the catalog search's best script on
	// that part). Absent, both parts take m_best.
	MBestPublic  *float64 `yaml:"m_best_public,omitempty"`
	MBestPrivate *float64 `yaml:"m_best_private,omitempty"`
	// WorkspaceBytes and WorkspaceFiles are optional: the task's own
	// workspace quota (all its files, data included, and what a run
	// writes), for a task whose data does not fit the stages' default
	// (env.workspace_bytes, env.workspace_files); 0 or absent: theirs.
	WorkspaceBytes int64 `yaml:"workspace_bytes,omitempty"`
	WorkspaceFiles int64 `yaml:"workspace_files,omitempty"`
}

// Task is a loaded, checked task folder.
type Task struct {
	Spec
	// Dir is the task folder (absolute).
	Dir string
	// Description is description.md.
	Description string
	// Parts is private/parts.csv: the task's own, or computed from
	// answers.csv by AnswerSplit when the folder has none (then it exists
	// only in memory, and in the private tree the stage uploads).
	Parts []byte
	// PartsComputed says Parts was computed, not read from the folder.
	PartsComputed bool
	// PartsKeyed says Parts is the keyed split of a data root's secret
	// (LoadOptions.SplitKey), not the reference split of task.yaml's
	// seed; task.yaml's m_best_public and m_best_private, measured on
	// the reference split, then do not apply (both parts take m_best
	// unless the ingest measures them).
	PartsKeyed bool
	// SplitDraw is the draw of the keyed split Parts is (0: the first;
	// RunBaseline draws again while a part has no headroom).
	SplitDraw int
	// splitKey is the key of a keyed split.
	splitKey []byte
	// PartRows is how many hidden answers each part holds.
	PartRows PartCounts
}

// WorkspacePath returns the task's workspace/ folder.
func (t *Task) WorkspacePath() string { return filepath.Join(t.Dir, WorkspaceDir) }

// PrivatePath returns the task's private/ folder.
func (t *Task) PrivatePath() string { return filepath.Join(t.Dir, PrivateDir) }

// Row returns the tasks-dataset row of t without the measured fields
// (m_init, baseline duration) and tree references. m_best is NaN while it
// is still to be measured (MBestMeasure).
func (t *Task) Row() schemas.Task {
	best := math.NaN()
	if t.MBest != nil {
		best = *t.MBest
	}
	row := schemas.Task{
		TaskID: t.ID, Title: t.Title, Modality: t.Modality, TaskType: t.TaskType,
		Metric: t.Metric, Direction: t.Direction, MBest: best, MBestSource: t.MBestSource,
		Split: t.Split, TimeLimitS: *t.TimeLimitS, Description: t.Description, Initial: t.Initial,
		WorkspaceBytes: t.WorkspaceBytes, WorkspaceFiles: t.WorkspaceFiles,
	}
	if t.Parts != nil {
		row.AnswerSplit = t.SplitDescription()
		pub, priv := best, best
		if t.MBestPublic != nil {
			pub = *t.MBestPublic
		}
		if t.MBestPrivate != nil {
			priv = *t.MBestPrivate
		}
		row.MBestPublic, row.MBestPrivate = &pub, &priv
	}
	return row
}

var idRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// LoadOptions change what [LoadWith] and [LoadSuiteWith] accept.
type LoadOptions struct {
	// MeasureMissingMBest takes a task.yaml without m_best as one saying
	// `m_best: measure` (`mlerl ingest tasks --m_best measure`).
	MeasureMissingMBest bool
	// SplitKey, when set, is the data root's secret that cuts the hidden
	// answers of a task with a computed rule (strata-hash-v1, time-v1):
	// the keyed split (split.go), which no agent can recompute, rather
	// than the reference split of task.yaml's seed and the folder's
	// parts.csv. A task with answer_split given keeps its author's parts.
	SplitKey []byte
}

// Load reads and checks the task folder dir: task.yaml's schema (required
// fields, known values, no unknown keys), that its id matches the folder
// name, and that description.md, workspace/train.py, private/grade.py and
// private/answers.csv exist and that no private file is copied into the
// workspace. It does not run anything. Every fault found is returned
// joined (each an [*Error]); the Task is nil then.
func Load(dir string) (*Task, error) { return LoadWith(dir, LoadOptions{}) }

// LoadWith is [Load] with options.
func LoadWith(dir string, o LoadOptions) (*Task, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(abs)
	fail := func(file, field, format string, args ...any) error {
		return &Error{Task: name, File: file, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	b, err := os.ReadFile(filepath.Join(abs, SpecFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fail(SpecFile, "", "missing: every task folder needs a task.yaml (see tasks/README.md for its fields)")
		}
		return nil, fail(SpecFile, "", "%v", err)
	}
	spec, err := ParseSpec(b)
	if err != nil {
		return nil, fail(SpecFile, "", "%v", err)
	}
	if spec.ID != "" {
		name = spec.ID
	}
	if o.MeasureMissingMBest && spec.MBest == nil {
		spec.MBestMeasure = true
	}
	var errs []error
	for _, fe := range spec.Check() {
		fe.Task = name
		errs = append(errs, fe)
	}
	if spec.ID != "" && spec.ID != filepath.Base(abs) {
		errs = append(errs, fail(SpecFile, "id", "%q differs from the folder name %q: rename one so they match", spec.ID, filepath.Base(abs)))
	}
	for _, f := range []struct{ rel, what string }{
		{DescriptionFile, "the task statement the agent reads"},
		{filepath.Join(WorkspaceDir, ScriptFile), "the initial script (sections imports, data, model, training, evaluate; prints VAL_METRIC, writes submission.csv)"},
		{filepath.Join(PrivateDir, GraderFile), "the grader: python3 private/grade.py <submission.csv> <answers.csv> prints one JSON line"},
		{filepath.Join(PrivateDir, AnswersFile), "the hidden test labels the grader reads"},
	} {
		if st, err := os.Stat(filepath.Join(abs, f.rel)); err != nil || !st.Mode().IsRegular() {
			errs = append(errs, fail(filepath.ToSlash(f.rel), "", "missing: add %s", f.what))
		}
	}
	if err := checkNoLeak(abs); err != nil {
		errs = append(errs, fail(WorkspaceDir, "", "%v", err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	desc, err := os.ReadFile(filepath.Join(abs, DescriptionFile))
	if err != nil {
		return nil, fail(DescriptionFile, "", "%v", err)
	}
	if len(bytes.TrimSpace(desc)) == 0 {
		return nil, fail(DescriptionFile, "", "empty: describe the task, its data files and the submission format")
	}
	t := &Task{Spec: *spec, Dir: abs, Description: string(desc)}
	if err := t.loadParts(o.SplitKey); err != nil {
		return nil, err
	}
	return t, nil
}

// loadParts reads private/parts.csv, or computes it from answers.csv by
// the task's answer_split rule when the folder has none, and checks it.
// With key, a computed rule's parts are the keyed split (whatever
// parts.csv the folder holds: the reference split).
func (t *Task) loadParts(key []byte) error {
	rel := PrivateDir + "/" + PartsFile
	answers, err := os.ReadFile(filepath.Join(t.PrivatePath(), AnswersFile))
	if err != nil {
		return &Error{Task: t.ID, File: PrivateDir + "/" + AnswersFile, Msg: err.Error()}
	}
	rule := t.SplitRuleOrDefault()
	parts, err := os.ReadFile(filepath.Join(t.PrivatePath(), PartsFile))
	switch {
	case key != nil && (rule == SplitStrataHash || rule == SplitTime):
		if parts, err = SplitAnswersKeyed(answers, rule, t.ID, 0, key, t.TaskType, t.Metric); err != nil {
			return &Error{Task: t.ID, File: PrivateDir + "/" + AnswersFile, Field: "answer_split", Msg: err.Error()}
		}
		t.PartsComputed, t.PartsKeyed, t.splitKey = true, true, key
		t.MBestPublic, t.MBestPrivate = nil, nil // measured on the reference split
	case rule == SplitNone && err == nil:
		return &Error{Task: t.ID, File: rel, Msg: fmt.Sprintf("task.yaml says answer_split: %s, but there is a %s: delete it, or set answer_split: %s to use it", SplitNone, rel, SplitGiven)}
	case rule == SplitNone:
		return nil // no parts: scored on all the hidden answers
	case errors.Is(err, os.ErrNotExist) && rule == SplitGiven:
		return &Error{Task: t.ID, File: rel, Msg: fmt.Sprintf("missing: answer_split %s needs the author's %s (id,part per answers row), or set answer_split to %s or %s to have it computed", SplitGiven, rel, SplitStrataHash, SplitTime)}
	case errors.Is(err, os.ErrNotExist):
		if parts, err = SplitAnswers(answers, rule, t.AnswerSplitSeed, t.TaskType, t.Metric); err != nil {
			return &Error{Task: t.ID, File: PrivateDir + "/" + AnswersFile, Field: "answer_split", Msg: err.Error()}
		}
		t.PartsComputed = true
	case err != nil:
		return &Error{Task: t.ID, File: rel, Msg: err.Error()}
	case rule != SplitGiven:
		// A parts.csv beside a computable rule must be that rule's.
		want, err := SplitAnswers(answers, rule, t.AnswerSplitSeed, t.TaskType, t.Metric)
		if err != nil {
			return &Error{Task: t.ID, File: PrivateDir + "/" + AnswersFile, Field: "answer_split", Msg: err.Error()}
		}
		if !bytes.Equal(bytes.ReplaceAll(parts, []byte("\r\n"), []byte("\n")), want) {
			return &Error{Task: t.ID, File: rel, Msg: fmt.Sprintf("differs from what task.yaml's answer_split %s (seed %q) computes: delete it to have it computed, or set answer_split: %s to keep your own", rule, t.splitSeed(), SplitGiven)}
		}
	}
	c, err := CountParts(answers, parts, t.Metric)
	if err != nil {
		return &Error{Task: t.ID, File: rel, Msg: err.Error()}
	}
	t.Parts, t.PartRows = parts, c
	return nil
}

// SplitRuleOrDefault is task.yaml's answer_split, or DefaultSplitRule.
func (s *Spec) SplitRuleOrDefault() string {
	if s.AnswerSplit != "" {
		return s.AnswerSplit
	}
	return DefaultSplitRule(s.TaskType)
}

func (s *Spec) splitSeed() string {
	if s.AnswerSplitSeed != "" {
		return s.AnswerSplitSeed
	}
	return DefaultSplitSeed
}

// SplitDescription says how the task's hidden answers were cut, for the
// tasks dataset: the rule, its seed where it has one, and the parts' rows.
func (t *Task) SplitDescription() string {
	rule := t.SplitRuleOrDefault()
	how := ""
	if rule == SplitTime {
		how = "the horizon in pairs, "
	}
	switch {
	case t.PartsKeyed:
		return fmt.Sprintf("%s keyed by the data root's secret (%sdraw %d): %d public, %d private", rule, how, t.SplitDraw+1, t.PartRows.Public, t.PartRows.Private)
	case rule == SplitStrataHash:
		return fmt.Sprintf("%s seed %s: %d public, %d private", rule, t.splitSeed(), t.PartRows.Public, t.PartRows.Private)
	default:
		return fmt.Sprintf("%s: %d public, %d private", rule, t.PartRows.Public, t.PartRows.Private)
	}
}

// PrivateFiles is the private tree as graders get it: the folder's
// private/ files plus the computed parts.csv when the folder has none.
func (t *Task) PrivateFiles() (blobs.Files, error) {
	files, err := ReadTree(t.PrivatePath())
	if err != nil {
		return nil, &Error{Task: t.ID, File: PrivateDir, Msg: err.Error()}
	}
	if t.Parts != nil {
		files[PartsFile] = blobs.File{Data: t.Parts, Mode: 0o644}
	}
	return files, nil
}

// MeasureMBest is the task.yaml value of m_best that asks for it to be
// measured (`m_best: measure`).
const MeasureMBest = "measure"

// specFile is task.yaml as decoded: Spec with m_best, which is a number
// or "measure".
type specFile struct {
	Spec  `yaml:",inline"`
	MBest mBestValue `yaml:"m_best"`
}

// mBestValue decodes m_best: a number, or the word "measure".
type mBestValue struct {
	v       *float64
	measure bool
}

func (m *mBestValue) UnmarshalYAML(n *yaml.Node) error {
	switch {
	case n.Kind == yaml.ScalarNode && n.Value == MeasureMBest:
		m.measure = true
		return nil
	case n.ShortTag() == "!!null": // `m_best:` with no value: missing
		return nil
	}
	var v float64
	if err := n.Decode(&v); err != nil || n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: m_best %q: want a number, or %s (the catalog search measures it at ingest)", n.Line, n.Value, MeasureMBest)
	}
	m.v = &v
	return nil
}

// ParseSpec decodes task.yaml, rejecting unknown keys (a misspelt field
// would otherwise be silently missing). It does not check values; see
// [Spec.Check].
func ParseSpec(b []byte) (*Spec, error) {
	var f specFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		msg := err.Error()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty: fill in id, title, modality, task_type, metric, direction, m_best, m_best_source, time_limit_s, split")
		}
		msg = strings.ReplaceAll(msg, "not found in type tasks.specFile", "is not a task.yaml field (known: id, title, modality, task_type, metric, direction, m_best, m_best_source, m_best_public, m_best_private, time_limit_s, split, split_rule, answer_split, answer_split_seed, source, initial, workspace_bytes, workspace_files)")
		return nil, fmt.Errorf("not valid task YAML: %s", msg)
	}
	s := f.Spec
	s.MBest, s.MBestMeasure = f.MBest.v, f.MBest.measure
	return &s, nil
}

// Check returns one *Error per bad or missing field (Task left empty).
func (s *Spec) Check() []*Error {
	var errs []*Error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &Error{File: SpecFile, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if s.ID == "" {
		bad("id", "missing: set it to the folder name")
	} else if !idRe.MatchString(s.ID) {
		bad("id", "%q: use lowercase letters, digits, '-', '_' or '.'", s.ID)
	}
	if strings.TrimSpace(s.Title) == "" {
		bad("title", "missing: a one-line human title")
	}
	if s.Modality == "" {
		bad("modality", "missing: tabular, image, text, time-series, graph, ...")
	}
	if s.TaskType == "" {
		bad("task_type", "missing: binary-classification, multiclass-classification, regression, forecasting, ...")
	}
	if s.Metric == "" {
		bad("metric", "missing: the metric the grader computes (accuracy, roc_auc, log_loss, rmse, mae, f1_macro, ...)")
	}
	switch s.Direction {
	case schemas.HigherIsBetter, schemas.LowerIsBetter:
	case "":
		m := s.Metric
		if m == "" {
			bad("direction", "missing: %q or %q", schemas.HigherIsBetter, schemas.LowerIsBetter)
		} else if d, ok := KnownDirection(m); ok {
			bad("direction", "missing: metric %s needs a direction (%s for %s)", m, d, m)
		} else {
			bad("direction", "missing: metric %q needs a direction, %q or %q", m, schemas.HigherIsBetter, schemas.LowerIsBetter)
		}
	default:
		bad("direction", "%q: want %q or %q", s.Direction, schemas.HigherIsBetter, schemas.LowerIsBetter)
	}
	if d, ok := KnownDirection(s.Metric); ok && s.Direction != "" && d != s.Direction {
		bad("direction", "%q contradicts metric %s, which is %s-is-better", s.Direction, s.Metric, d)
	}
	switch {
	case s.MBestMeasure: // measured at ingest, which sets m_best_source too
	case s.MBest == nil:
		bad("m_best", "missing: the best known (or human) score on this task, with its source in m_best_source, or %s to have `mlerl ingest tasks` measure it with the catalog search (or run it with --m_best %s)", MeasureMBest, MeasureMBest)
	case math.IsNaN(*s.MBest) || math.IsInf(*s.MBest, 0):
		bad("m_best", "%v: want a finite number", *s.MBest)
	case strings.TrimSpace(s.MBestSource) == "":
		bad("m_best_source", "missing: say where m_best comes from (a leaderboard, a paper, a measured strong script)")
	}
	if s.TimeLimitS == nil {
		bad("time_limit_s", "missing: the wall-clock limit of one run of the script, in seconds")
	} else if !(*s.TimeLimitS > 0) || math.IsInf(*s.TimeLimitS, 0) {
		bad("time_limit_s", "%v: want a positive number of seconds", *s.TimeLimitS)
	}
	if s.WorkspaceBytes < 0 {
		bad("workspace_bytes", "%d: want a positive number of bytes (1073741824 is 1 GiB), or leave it out for the stages' env.workspace_bytes", s.WorkspaceBytes)
	}
	if s.WorkspaceFiles < 0 {
		bad("workspace_files", "%d: want a positive number of files and folders, or leave it out for the stages' env.workspace_files", s.WorkspaceFiles)
	}
	switch s.Initial {
	case "", schemas.InitialGenerated, schemas.InitialOriginal:
	default:
		bad("initial", "%q: want %s (a sectioned train.py, the default) or %s (the benchmark's own script, for an LLM editor)", s.Initial, schemas.InitialGenerated, schemas.InitialOriginal)
	}
	switch s.AnswerSplit {
	case "", SplitStrataHash, SplitTime, SplitGiven, SplitNone:
	default:
		bad("answer_split", "%q: want %s (rows dealt to the two parts by hashed id, per class), %s (forecasting: the earlier half of the horizon public), %s (your own private/%s) or %s (no parts: too few answers)", s.AnswerSplit, SplitStrataHash, SplitTime, SplitGiven, PartsFile, SplitNone)
	}
	for _, f := range []struct {
		key string
		v   *float64
	}{{"m_best_public", s.MBestPublic}, {"m_best_private", s.MBestPrivate}} {
		if f.v != nil && (math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
			bad(f.key, "%v: want a finite number (or leave it out: the part takes m_best)", *f.v)
		}
	}
	switch s.Split {
	case schemas.HeldIn, schemas.HeldOut:
	case "":
		bad("split", "missing: %q (training) or %q (evaluation only)", schemas.HeldIn, schemas.HeldOut)
	default:
		bad("split", "%q: want %q or %q", s.Split, schemas.HeldIn, schemas.HeldOut)
	}
	return errs
}

// knownDirections gives the direction of common metrics, to catch a
// direction that contradicts its metric.
var knownDirections = map[string]string{
	"accuracy": schemas.HigherIsBetter, "balanced_accuracy": schemas.HigherIsBetter,
	"roc_auc": schemas.HigherIsBetter, "auc": schemas.HigherIsBetter, "average_precision": schemas.HigherIsBetter,
	"f1": schemas.HigherIsBetter, "f1_macro": schemas.HigherIsBetter, "f1_micro": schemas.HigherIsBetter,
	"f1_samples": schemas.HigherIsBetter, "f1_weighted": schemas.HigherIsBetter, "r2": schemas.HigherIsBetter,
	"qwk": schemas.HigherIsBetter, "mcc": schemas.HigherIsBetter, "ndcg": schemas.HigherIsBetter,
	"map": schemas.HigherIsBetter, "pearson": schemas.HigherIsBetter, "spearman": schemas.HigherIsBetter,
	"jaccard":  schemas.HigherIsBetter,
	"log_loss": schemas.LowerIsBetter, "rmse": schemas.LowerIsBetter, "mse": schemas.LowerIsBetter,
	"mae": schemas.LowerIsBetter, "rmsle": schemas.LowerIsBetter, "mape": schemas.LowerIsBetter,
	"smape": schemas.LowerIsBetter, "error_rate": schemas.LowerIsBetter, "hamming_loss": schemas.LowerIsBetter,
}

// KnownDirection returns the direction of a common metric name.
func KnownDirection(metric string) (string, bool) {
	d, ok := knownDirections[metric]
	return d, ok
}

// checkNoLeak fails when a private file (by name or by content) appears in
// the workspace: the agent must never see the hidden labels or the grader.
func checkNoLeak(dir string) error {
	private := map[string]string{}
	filepath.WalkDir(filepath.Join(dir, PrivateDir), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
				private[string(b)] = filepath.Base(p)
			}
		}
		return nil
	})
	var leaks []string
	filepath.WalkDir(filepath.Join(dir, WorkspaceDir), func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if base := filepath.Base(p); base == AnswersFile || base == GraderFile {
			leaks = append(leaks, filepath.ToSlash(rel))
			return nil
		}
		if st, err := d.Info(); err == nil && st.Size() < 64<<20 {
			if b, err := os.ReadFile(p); err == nil {
				if src, ok := private[string(b)]; ok {
					leaks = append(leaks, fmt.Sprintf("%s (a copy of private/%s)", filepath.ToSlash(rel), src))
				}
			}
		}
		return nil
	})
	if len(leaks) > 0 {
		sort.Strings(leaks)
		return fmt.Errorf("holds private files %s: remove them, the agent must not see hidden labels or the grader", strings.Join(leaks, ", "))
	}
	return nil
}

// LoadSuite loads every task folder directly under root (a folder holding
// a task.yaml). It returns the good tasks sorted by id and one error per
// bad folder; an error reading root itself is returned as the last value.
func LoadSuite(root string) ([]*Task, []error, error) { return LoadSuiteWith(root, LoadOptions{}) }

// LoadSuiteWith is [LoadSuite] with options for each task's [LoadWith].
func LoadSuiteWith(root string, o LoadOptions) ([]*Task, []error, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, fmt.Errorf("task suite %s: %w", root, err)
	}
	var (
		good []*Task
		bad  []error
	)
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || strings.HasPrefix(e.Name(), "_") {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(dir, SpecFile)); errors.Is(err, os.ErrNotExist) {
			// A folder without task.yaml that looks like a task is an error;
			// anything else (a shared helper folder) is skipped.
			if _, werr := os.Stat(filepath.Join(dir, WorkspaceDir)); werr == nil {
				bad = append(bad, &Error{Task: e.Name(), File: SpecFile, Msg: "missing: the folder has workspace/ but no task.yaml"})
			}
			continue
		}
		t, err := LoadWith(dir, o)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		good = append(good, t)
	}
	sort.Slice(good, func(i, j int) bool { return good[i].ID < good[j].ID })
	if len(good) == 0 && len(bad) == 0 {
		return nil, nil, fmt.Errorf("task suite %s: no task folders (each needs a %s)", root, SpecFile)
	}
	return good, bad, nil
}
