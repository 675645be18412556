package ingest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"
	"gopkg.in/yaml.v3"

	"github.com/mlerl/mlerl"
	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/safefile"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/schemas"
)

// SuiteBuiltin is TasksConfig.Suite's default: the built-in suite embedded
// in the binary (github.com/mlerl/mlerl's Suite), written to a temporary
// folder for the run.
const SuiteBuiltin = "builtin"

// Task sources (TasksConfig.From).
const (
	FromBuiltin      = "builtin"
	FromMLEBench     = "mlebench"
	FromMLAgentBench = "mlagentbench"
)

// TasksConfig configures `mlerl ingest tasks`.
type TasksConfig struct {
	// Data is the data root the tasks dataset and the task trees go to.
	Data string `yaml:"data" help:"data root: a local folder or gs://bucket/prefix"`
	// Suite is the suite ingested with any imported tasks: the built-in
	// one embedded in the binary, or a folder of task folders.
	Suite string `yaml:"suite" help:"task suite to ingest: builtin (the built-in suite embedded in this binary, the same from any folder), a named subset of it (tasks/suites.txt: demo, the fifteen tasks make demo runs), a folder of task folders (e.g. tasks, a checkout's own copy; ./NAME for a folder named like a subset), or empty (only imported tasks)"`
	// From selects an importer run before ingesting.
	From string `yaml:"from" help:"builtin (the suite only), mlebench or mlagentbench: convert source into task folders under import_to and ingest them too"`
	// Source is what the importer reads.
	Source string `yaml:"source" help:"folder to import: MLE-bench's repository, a competition folder or any folder above competitions, or an MLAgentBench checkout or benchmarks/ folder; also the command's argument"`
	// MLEBenchData is where `mlebench prepare` wrote the data.
	MLEBenchData string `yaml:"mlebench_data" help:"MLE-bench's data folder (its --data-dir, holding <id>/prepared/public and private), looked in after each competition's folder and data/<id>/prepared beside it, before ~/.cache/mle-bench/data"`
	// Grader selects the grader of MLE-bench imports.
	Grader string `yaml:"grader" help:"grader an MLE-bench import writes: csv (generated for the common metrics; needs only pandas and scikit-learn) or mlebench (the competition's own grade_fn from config.yaml, called through the mlebench package, which must be installed for python)"`
	// Initial selects the initial script of MLAgentBench imports.
	Initial string `yaml:"initial" help:"initial train.py of an MLAgentBench import: generated (a sectioned baseline, which the offline editor needs) or original (MLAgentBench's own, which only an LLM editor can edit: env.editor llm at rollout and evaluate; it must run as it is), recorded in task.yaml"`
	// ImportTo receives the converted task folders (kept, so that what the
	// importer could not supply can be added by hand and ingested again).
	ImportTo string `yaml:"import_to" help:"folder the importer writes task folders into (empty: imported/<from>)"`
	// Python runs the scripts and graders.
	Python string `yaml:"python" help:"Python interpreter with numpy, pandas and scikit-learn (empty: /usr/bin/python3, else python3 on PATH)"`
	// Only restricts the run to some task ids.
	Only []string `yaml:"only" help:"ingest only these task ids (empty: all)"`
	// Workers bounds how many initial scripts run at once.
	Workers int `yaml:"workers" help:"tasks run at once (0: one per CPU core)"`
	// Timeout overrides every task's time_limit_s for the baseline run.
	Timeout time.Duration `yaml:"timeout" help:"time limit of one baseline run, overriding task.yaml's time_limit_s (0: use time_limit_s)"`
	// Warm reuses one interpreter that has imported numpy/pandas/sklearn.
	Warm bool `yaml:"warm" help:"run scripts from a warm worker that pre-imports numpy, pandas and scikit-learn (false: a fresh python per run)"`
	// MemoryMB bounds one baseline run's memory.
	MemoryMB int `yaml:"memory_mb" help:"memory limit of one script run in MiB (0: the sandbox's default of 4096)"`
	// MBest "measure" fills a missing m_best by the catalog search, as a
	// task.yaml saying `m_best: measure` asks for.
	MBest string `yaml:"m_best" help:"measure: a task whose task.yaml has no m_best gets it measured by the catalog search that measured the built-in suite's (as m_best: measure in task.yaml asks); empty: a missing m_best is an error"`
	// MeasureScripts and MeasureTime bound one task's catalog search.
	MeasureScripts int           `yaml:"measure_scripts" help:"catalog search budget per task: the most edited scripts run (0: every combination for the task's kind, 8 to 15)"`
	MeasureTime    time.Duration `yaml:"measure_time" help:"catalog search budget per task: no edited script starts after this long (0: no limit)"`
}

// DefaultTasksConfig returns the defaults: the built-in suite embedded in
// the binary, written to ./data.
func DefaultTasksConfig() TasksConfig {
	return TasksConfig{Data: "./data", Suite: SuiteBuiltin, From: FromBuiltin, Grader: GraderCSV, Initial: schemas.InitialGenerated, Warm: true, MemoryMB: 4096, MeasureTime: 10 * time.Minute}
}

// Derive fills the import folder from the source kind.
func (c *TasksConfig) Derive() {
	if c.ImportTo == "" && c.From != FromBuiltin && c.From != "" {
		c.ImportTo = "imported/" + c.From
	}
}

// Validate checks every field, before anything is read or written.
func (c *TasksConfig) Validate() error {
	switch c.From {
	case FromBuiltin:
		if c.Suite == "" {
			return config.Errorf("suite", c.Suite, "nothing to ingest with from %s (set suite, or from %s|%s with a source)", FromBuiltin, FromMLEBench, FromMLAgentBench)
		}
		if c.Source != "" {
			return config.Errorf("source", c.Source, "given but from is %s (add --from %s or --from %s)", FromBuiltin, FromMLEBench, FromMLAgentBench)
		}
	case FromMLEBench, FromMLAgentBench:
		if c.Source == "" {
			return config.Errorf("from", c.From, "needs a source folder (the command's argument or --source)")
		}
	default:
		return config.Errorf("from", c.From, "want %s, %s or %s", FromBuiltin, FromMLEBench, FromMLAgentBench)
	}
	if i := slices.Index(c.Only, ""); i >= 0 {
		return config.Errorf("only", c.Only, "item %d is empty: want task ids", i+1)
	}
	switch c.Grader {
	case GraderCSV:
	case GraderMLEBench:
		if c.From != FromMLEBench {
			return config.Errorf("grader", c.Grader, "is for MLE-bench imports (add --from %s)", FromMLEBench)
		}
	default:
		return config.Errorf("grader", c.Grader, "want %s or %s", GraderCSV, GraderMLEBench)
	}
	switch c.Initial {
	case schemas.InitialGenerated:
	case schemas.InitialOriginal:
		if c.From != FromMLAgentBench {
			return config.Errorf("initial", c.Initial, "is for MLAgentBench imports, whose tasks ship a train.py (add --from %s)", FromMLAgentBench)
		}
	default:
		return config.Errorf("initial", c.Initial, "want %s or %s", schemas.InitialGenerated, schemas.InitialOriginal)
	}
	switch {
	case c.Data == "":
		return config.Errorf("data", c.Data, "must name the data root (a folder or gs://bucket/prefix)")
	case c.Workers < 0:
		return config.Errorf("workers", c.Workers, "must not be negative (0: one per CPU core)")
	case c.Timeout < 0:
		return config.Errorf("timeout", c.Timeout, "must not be negative (0: each task's time_limit_s)")
	case c.MemoryMB < 0:
		return config.Errorf("memory_mb", c.MemoryMB, "must not be negative (0: the sandbox's default)")
	case c.MBest != "" && c.MBest != tasks.MeasureMBest:
		return config.Errorf("m_best", c.MBest, "want %s (measure a missing m_best with the catalog search) or empty", tasks.MeasureMBest)
	case c.MeasureScripts < 0:
		return config.Errorf("measure_scripts", c.MeasureScripts, "must not be negative (0: every combination)")
	case c.MeasureTime < 0:
		return config.Errorf("measure_time", c.MeasureTime, "must not be negative (0: no limit)")
	}
	return nil
}

// ErrSomeFailed is wrapped by RunTasks's error when some tasks failed but
// the others were committed.
var ErrSomeFailed = errors.New("some tasks failed")

// newRunner makes the sandbox runner the baseline runs go through.
func newRunner(ctx context.Context, python string, warm bool) (sandbox.Runner, error) {
	if warm {
		return sandbox.NewWarm(ctx, python)
	}
	return sandbox.NewCold(python), nil
}

// graderOf grades the way the environment grades at rollout (env.Grade):
// the task's grader is trusted code, run in a warm worker outside the
// sandbox with this process's environment, so a package it imports (such
// as mlebench) is found wherever python finds it. The submission is read
// as the environment reads it (a regular file of the script's own).
func graderOf(python string) tasks.GradeFunc {
	return func(ctx context.Context, privateDir, submission string) (tasks.Grade, error) {
		private, err := blobs.ReadDir(privateDir)
		if err != nil {
			return tasks.Grade{}, err
		}
		sub, err := env.ReadSubmission(filepath.Dir(submission))
		var se *safefile.Error
		if errors.As(err, &se) {
			return tasks.Grade{Reason: se.Error() + "; a submission must be a regular file the script writes"}, nil
		} else if err != nil {
			return tasks.Grade{}, err
		}
		return env.Grade(ctx, python, private, sub)
	}
}

// checkMLEBench fails, saying what to install, when python cannot import
// the mlebench package that --grader mlebench graders call.
func checkMLEBench(ctx context.Context, python string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", "import mlebench.grade_helpers")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ingest tasks: --grader %s: %s cannot import the mlebench package (%s): install MLE-bench's package for it (pip install -e <mle-bench checkout>, which also installs its requirements), or set --python to an interpreter that has it, or use --grader %s",
			GraderMLEBench, python, tasks.LastLines(stderr.String(), 1), GraderCSV)
	}
	return nil
}

// taskResult is one task's outcome.
type taskResult struct {
	id   string
	row  schemas.Task
	err  error
	note string // what the log should say about it (a measured m_best)
}

// RunTasks ingests tasks: it imports source folders if asked, loads and
// checks every task, runs each initial script in a fresh workspace through
// the sandbox (m_init_valid from its VAL_METRIC line, m_init from the
// grader's score of its submission, and the baseline duration), uploads
// each task's workspace/ and private/ trees to the blob store, and commits
// a new version of the tasks dataset with the good tasks. Bad tasks are
// reported one error each (task, file, field) and listed in the manifest's
// Extra["failures"]; the error returned then wraps ErrSomeFailed. Nothing
// is committed when no task succeeds; earlier versions are never touched.
func RunTasks(ctx context.Context, cfg TasksConfig) error {
	return runTasks(ctx, cfg, os.Stdout, os.Stderr)
}

// runTasks writes its summary table to out and progress and logs to log.
func runTasks(ctx context.Context, cfg TasksConfig, out, log io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("ingest tasks: %w", err)
	}
	python, err := sandbox.FindPython(cfg.Python)
	if err != nil {
		return err
	}
	if cfg.Grader == GraderMLEBench {
		if err := checkMLEBench(ctx, python); err != nil {
			return err
		}
	}
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return err
	}

	// 1. Import, then load and check every task folder.
	var (
		loaded   []*tasks.Task
		failures []taskResult
	)
	key, made, err := SplitKey(ctx, st)
	if err != nil {
		return err
	}
	if made {
		fmt.Fprintf(log, "ingest tasks: made %s, the secret that cuts this data root's hidden answers into their public and private parts (keep it with the data root; a task's parts stay the same while it does)\n", st.URI(SplitKeyFile))
	}
	loadOpts := tasks.LoadOptions{MeasureMissingMBest: cfg.MBest == tasks.MeasureMBest, SplitKey: key}
	if cfg.From != FromBuiltin {
		imported, err := Import(cfg.From, cfg.Source, cfg.ImportTo, ImportOptions{MLEBenchData: cfg.MLEBenchData, MeasureMBest: loadOpts.MeasureMissingMBest, Grader: cfg.Grader, Initial: cfg.Initial})
		if err != nil {
			return err
		}
		for _, im := range imported {
			fmt.Fprint(log, im.Report())
			if im.Err != nil {
				failures = append(failures, taskResult{id: im.ID, err: im.Err})
				continue
			}
			t, err := tasks.LoadWith(im.Dir, loadOpts)
			if err != nil {
				failures = append(failures, taskResult{id: im.ID, err: err})
				continue
			}
			loaded = append(loaded, t)
		}
	}
	if cfg.Suite != "" {
		dir, subset, cleanup, err := suiteDir(cfg.Suite)
		if err != nil {
			return err
		}
		defer cleanup()
		good, bad, err := tasks.LoadSuiteWith(dir, loadOpts)
		if err != nil {
			return fmt.Errorf("%w (set suite to %s for the suite embedded in this binary, to a folder of task folders, or to \"\" to ingest only imported tasks)", err, SuiteBuiltin)
		}
		if subset != nil {
			good, bad = inSubset(good, bad, subset)
			fmt.Fprintf(log, "ingest tasks: suite %s: %d of the built-in suite's tasks\n", cfg.Suite, len(subset))
		}
		loaded = append(loaded, good...)
		for _, e := range bad {
			failures = append(failures, taskResult{id: taskOf(e), err: e})
		}
	}
	loaded, failures, err = selectTasks(loaded, failures, cfg.Only)
	if err != nil {
		return err
	}

	// 2. Run each initial script, grade it and upload its trees, in parallel.
	workers := cfg.Workers
	if workers == 0 {
		workers = runtime.NumCPU()
	}
	var runner sandbox.Runner
	if len(loaded) > 0 {
		if runner, err = newRunner(ctx, python, cfg.Warm); err != nil {
			return err
		}
		defer runner.Close()
	}
	limits := sandbox.Limits{Timeout: cfg.Timeout, MemoryBytes: int64(cfg.MemoryMB) << 20, MaxOutputBytes: 1 << 20}
	grade := graderOf(python)
	results := make([]taskResult, len(loaded))
	bar := progress.New("ingest tasks", len(loaded))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i, t := range loaded {
		g.Go(func() error {
			results[i] = ingestOne(gctx, st, runner, grade, t, limits, cfg)
			bar.Add(1, t.ID)
			return gctx.Err()
		})
	}
	err = g.Wait()
	bar.Done()
	if err != nil {
		return err
	}

	// 3. Summarise, and commit the good tasks.
	var rows []schemas.Task
	for _, r := range results {
		if r.err != nil {
			failures = append(failures, r)
			continue
		}
		rows = append(rows, r.row)
	}
	printSummary(out, results, failures)
	for _, r := range results {
		if r.err == nil && r.note != "" {
			fmt.Fprintln(log, r.note)
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("no task ingested, %d failed: %w", len(failures), ErrSomeFailed)
	}
	m, err := commitTasks(ctx, st, cfg, rows, failures)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "wrote %s (%d tasks)\n", m.Ref().URI, m.Rows)
	if len(failures) > 0 {
		return fmt.Errorf("%d of %d tasks failed (the other %d are in %s): %w", len(failures), len(failures)+len(rows), len(rows), m.Ref().URI, ErrSomeFailed)
	}
	return nil
}

// SplitKeyFile is the data root's secret that keys the split of its tasks'
// hidden answers (internal/tasks' SplitAnswersKeyed): 32 random bytes, hex.
// Nothing in a workspace holds it, so no agent can tell its public test
// rows from its private ones; it is made by the first ingest into the data
// root and read by every later one, so that a task's parts stay the same.
const SplitKeyFile = "_secrets/answer_split.key"

// SplitKey reads the data root's split key, making it when there is none
// (made reports that). Two ingests racing to make it agree on the first.
func SplitKey(ctx context.Context, st store.Store) (key []byte, made bool, err error) {
	read := func() ([]byte, error) {
		b, err := store.ReadAll(ctx, st, SplitKeyFile)
		if err != nil {
			return nil, err
		}
		k, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(k) < 16 {
			return nil, fmt.Errorf("%s is not a split key (want at least 32 hex digits): restore it from a copy of the data root, or remove it to have a new one made, and then re-ingest (every task's public and private parts change)", st.URI(SplitKeyFile))
		}
		return k, nil
	}
	k, err := read()
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		return k, false, err
	}
	k = make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, false, fmt.Errorf("make the split key: %w", err)
	}
	err = store.WriteAll(ctx, st, SplitKeyFile, []byte(hex.EncodeToString(k)+"\n"), store.CreateOptions{IfNotExists: true})
	if errors.Is(err, store.ErrExists) {
		k, err = read()
		return k, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("make the split key: %w", err)
	}
	return k, true, nil
}

// ingestOne measures and uploads one task: its baseline, and its m_best
// when it is to be measured.
func ingestOne(ctx context.Context, st store.Store, runner sandbox.Runner, grade tasks.GradeFunc, t *tasks.Task, limits sandbox.Limits, cfg TasksConfig) taskResult {
	base, err := tasks.RunBaseline(ctx, runner, grade, t, limits)
	if err != nil {
		return taskResult{id: t.ID, err: err}
	}
	note := ""
	if t.MBestMeasure {
		if note, err = measureMBest(ctx, runner, grade, t, base, limits, cfg); err != nil {
			return taskResult{id: t.ID, err: err}
		}
	}
	ws, priv, err := tasks.UploadTrees(ctx, st, t)
	if err != nil {
		return taskResult{id: t.ID, err: err}
	}
	row := t.Row()
	row.MInit = base.TestScore
	row.MInitTest = base.TestScore
	row.MInitPublic, row.MInitPrivate = base.Public, base.Private
	row.MInitValid = base.ValMetric
	row.BaselineDurationS = base.Duration.Seconds()
	row.WorkspaceTree, row.PrivateTree = ws, priv
	row.Source = sourceOf(t)
	if t.PartsKeyed && row.HasParts() && !t.MBestMeasure {
		// task.yaml's per-part m_best belong to the reference split: both
		// parts take m_best, which each part's m_init must be short of.
		for _, p := range []struct {
			name string
			init float64
		}{{"public", *row.MInitPublic}, {"private", *row.MInitPrivate}} {
			if !tasks.Better(t.Direction, row.MBest, p.init) {
				note += fmt.Sprintf("ingest tasks: %s: m_best %g does not beat the initial script's %g on the %s part of this data root's split: its headroom there is none; measure it (m_best: measure) for this data root\n", t.ID, row.MBest, p.init, p.name)
			}
		}
		note = strings.TrimSuffix(note, "\n")
	}
	return taskResult{id: t.ID, row: row, note: note}
}

// measureMBest sets t's m_best and m_best_source by the catalog search on
// its initial train.py, within cfg's budget, and returns the log line that
// says what was measured and how to keep it.
func measureMBest(ctx context.Context, runner sandbox.Runner, grade tasks.GradeFunc, t *tasks.Task, base tasks.Baseline, limits sandbox.Limits, cfg TasksConfig) (string, error) {
	rel := tasks.WorkspaceDir + "/" + tasks.ScriptFile
	if t.Initial == schemas.InitialOriginal {
		rel = tasks.PrivateDir + "/" + sectionedFile // the benchmark's own has no sections
	}
	script, err := os.ReadFile(filepath.Join(t.Dir, rel))
	if errors.Is(err, os.ErrNotExist) && t.Initial == schemas.InitialOriginal {
		return "", &tasks.Error{Task: t.ID, File: tasks.SpecFile, Field: "m_best", Msg: fmt.Sprintf("%s: the catalog search edits sections, which the original train.py lacks, and there is no %s (the importer writes one when it can generate a baseline); set m_best by hand", tasks.MeasureMBest, rel)}
	}
	if err != nil {
		return "", err
	}
	if err := catalog.CheckSections(string(script)); err != nil {
		return "", &tasks.Error{Task: t.ID, File: tasks.SpecFile, Field: "m_best", Msg: fmt.Sprintf("%s: the catalog search edits the sections of %s, and %v; set m_best by hand", tasks.MeasureMBest, rel, err)}
	}
	budget := tasks.MeasureBudget{Scripts: cfg.MeasureScripts, Time: cfg.MeasureTime}
	m, err := tasks.Measure(ctx, runner, grade, t, string(script), base, limits, budget, time.Now())
	if err != nil {
		return "", err
	}
	t.MBest, t.MBestSource = &m.Score, m.Source
	t.MBestPublic, t.MBestPrivate = m.Public, m.Private
	keep := ""
	if m.Public != nil && m.Private != nil {
		keep = fmt.Sprintf(", `m_best_public: %g`, `m_best_private: %g`", *m.Public, *m.Private)
	}
	stopped := ""
	if m.Stopped {
		stopped = fmt.Sprintf(", stopped by the budget (measure_scripts %d, measure_time %s)", cfg.MeasureScripts, cfg.MeasureTime)
	}
	return fmt.Sprintf("ingest tasks: %s: m_best %g measured by the catalog search (%d of %d combinations, %d failed%s); to keep it, write `m_best: %g`%s and `m_best_source: %q` in %s",
		t.ID, m.Score, m.Scripts, m.Combinations, m.Failed, stopped, m.Score, keep, m.Source, filepath.Join(t.Dir, tasks.SpecFile)), nil
}

// selectTasks keeps the tasks named in only (all when empty), and turns a
// second task with an id already seen into a failure.
func selectTasks(loaded []*tasks.Task, failures []taskResult, only []string) ([]*tasks.Task, []taskResult, error) {
	seen := map[string]string{}
	var out []*tasks.Task
	for _, t := range loaded {
		if prev, ok := seen[t.ID]; ok {
			failures = append(failures, taskResult{id: t.ID, err: &tasks.Error{Task: t.ID, File: tasks.SpecFile, Field: "id",
				Msg: fmt.Sprintf("also used by %s: task ids must be unique, rename one", prev)}})
			continue
		}
		seen[t.ID] = t.Dir
		if len(only) == 0 || slices.Contains(only, t.ID) {
			out = append(out, t)
		}
	}
	if len(only) > 0 {
		failed := map[string]bool{}
		for _, f := range failures {
			failed[f.id] = true
		}
		var kept []taskResult
		for _, f := range failures {
			if slices.Contains(only, f.id) {
				kept = append(kept, f)
			}
		}
		failures = kept
		for _, id := range only {
			if _, ok := seen[id]; !ok && !failed[id] {
				return nil, nil, fmt.Errorf("only: no task %q (known: %s)", id, strings.Join(sortedKeys(seen), ", "))
			}
		}
	}
	return out, failures, nil
}

func commitTasks(ctx context.Context, st store.Store, cfg TasksConfig, rows []schemas.Task, failures []taskResult) (*datasets.Manifest, error) {
	sort.Slice(rows, func(i, j int) bool { return rows[i].TaskID < rows[j].TaskID })
	resolved := config.YAML(cfg)
	key := sha256.Sum256([]byte(config.Canonical(cfg)))
	p, err := datasets.Begin(ctx, st, schemas.Tasks.Name, schemas.Tasks, "ingest-tasks-"+hex.EncodeToString(key[:8]))
	if err != nil {
		return nil, err
	}
	if err := datasets.WritePart(ctx, p, "part-00000.parquet", rows); err != nil {
		return nil, err
	}
	type failure struct {
		Task  string `json:"task"`
		Error string `json:"error"`
	}
	fl := []failure{}
	for _, f := range failures {
		fl = append(fl, failure{Task: f.id, Error: f.err.Error()})
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.TaskID
	}
	return p.Commit(ctx, datasets.CommitOptions{
		Producer: datasets.Producer{Command: "mlerl ingest tasks", Config: asMap(resolved)},
		Extra:    map[string]any{"from": cfg.From, "tasks": ids, "failures": fl},
	})
}

// printSummary writes one line per task: its measured baseline or its error.
func printSummary(w io.Writer, results, failures []taskResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSPLIT\tMETRIC\tDIR\tM_INIT_VALID\tM_INIT\tM_BEST\tBASELINE_S\tSTATUS")
	for _, r := range results {
		if r.err != nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.4f\t%.4f\t%.4g\t%.1f\tok\n", r.id, r.row.Split, r.row.Metric, r.row.Direction,
			r.row.MInitValid, r.row.MInit, r.row.MBest, r.row.BaselineDurationS)
	}
	for _, f := range failures {
		fmt.Fprintf(tw, "%s\t\t\t\t\t\t\t\tFAILED\n", f.id)
	}
	tw.Flush()
	if len(failures) > 0 {
		fmt.Fprintf(w, "\n%d task(s) failed:\n", len(failures))
		for _, f := range failures {
			for _, line := range strings.Split(f.err.Error(), "\n") {
				fmt.Fprintf(w, "  %s\n", line)
			}
		}
	}
}

// suiteDir returns the folder of the suite named by suite: a folder as
// given, or for SuiteBuiltin and its named subsets (tasks/suites.txt) the
// embedded suite written to a fresh temporary folder, which cleanup
// removes (the tasks dataset keeps everything a later stage reads, so the
// folder is needed only while the stage runs), with the subset's task ids.
func suiteDir(suite string) (dir string, subset []string, cleanup func(), err error) {
	if suite != SuiteBuiltin {
		subsets, err := mlerl.Subsets()
		if err != nil {
			return "", nil, nil, err
		}
		if subset = subsets[suite]; subset == nil {
			return suite, nil, func() {}, nil
		}
	}
	dir, err = os.MkdirTemp("", "mlerl-suite-")
	if err != nil {
		return "", nil, nil, fmt.Errorf("built-in suite: %w", err)
	}
	cleanup = func() { os.RemoveAll(dir) }
	if err := mlerl.WriteSuite(dir); err != nil {
		cleanup()
		return "", nil, nil, err
	}
	return dir, subset, cleanup, nil
}

// inSubset keeps the loaded tasks and the load failures of the subset's
// task ids.
func inSubset(good []*tasks.Task, bad []error, subset []string) ([]*tasks.Task, []error) {
	var g []*tasks.Task
	for _, t := range good {
		if slices.Contains(subset, t.ID) {
			g = append(g, t)
		}
	}
	var b []error
	for _, e := range bad {
		if slices.Contains(subset, taskOf(e)) {
			b = append(b, e)
		}
	}
	return g, b
}

// taskOf returns the task named by a load error.
func taskOf(err error) string {
	var te *tasks.Error
	if errors.As(err, &te) {
		return te.Task
	}
	return "?"
}

// sourceOf tells where a task came from: task.yaml's source, else builtin.
func sourceOf(t *tasks.Task) string {
	if t.Source != "" {
		return t.Source
	}
	return FromBuiltin
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// asMap turns a rendered YAML config into a map, so the manifest's JSON
// carries the same keys as the YAML file and flags.
func asMap(resolved string) map[string]any {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(resolved), &m); err != nil {
		return map[string]any{"yaml": resolved}
	}
	return m
}
