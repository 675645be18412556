package ingest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/schemas"
)

// ImportMLAgentBench converts MLAgentBench tasks into task folders under
// dst (see [ImportOptions] for the choices). source is a checkout (holding MLAgentBench/benchmarks/), a
// benchmarks/ folder, or one benchmarks/<task> folder. A task holds env/
// (the files the agent sees, train.py among them) and scripts/
// (research_problem.txt, eval.py, prepare.py, and after preparation the
// hidden answers such as answer.csv). env/ becomes the workspace,
// research_problem.txt the description, the answers private/answers.csv.
// eval.py is copied to private/ for reference and its metric is inferred
// from its code; a CSV grader is generated for it. MLAgentBench's
// train.py has no sections and prints no VAL_METRIC line, so for tabular
// CSV tasks a generic sectioned baseline replaces it (the original is kept
// as train_original.py), unless ImportOptions.Initial is original: then
// env/train.py stays the initial script, for an LLM editor. MLAgentBench publishes no best score: m_best is
// always listed as missing. As for [ImportMLEBench], links out of a
// folder, named pipes and devices are never copied or waited on, and a
// second task folder whose name gives an id already imported in the run
// is not imported.
func ImportMLAgentBench(source, dst string, opts ImportOptions) ([]Imported, error) {
	root := source
	for _, r := range []string{"MLAgentBench/benchmarks", "benchmarks"} {
		if st, err := os.Stat(filepath.Join(source, r)); err == nil && st.IsDir() {
			root = filepath.Join(source, r)
			break
		}
	}
	dirs, err := findDirs(root, func(dir string) bool { return fileExists(filepath.Join(dir, "scripts", "research_problem.txt")) })
	if err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("mlagentbench source %s: no task folder (one holding env/ and scripts/research_problem.txt) in it, its benchmarks/ or MLAgentBench/benchmarks/", source)
	}
	var out []Imported
	seen := map[string]string{} // task id -> the task folder that gave it
	for _, dir := range dirs {
		im, err := importMLAgentBenchOne(dir, dst, opts, seen)
		if err != nil {
			return nil, fmt.Errorf("mlagentbench task %s: %w", dir, err)
		}
		out = append(out, im)
	}
	return out, nil
}

// importMLAgentBenchOne converts the task in dir; seen holds the task ids
// the import run has given so far (see [claim]).
func importMLAgentBenchOne(dir, dst string, opts ImportOptions, seen map[string]string) (Imported, error) {
	name := filepath.Base(dir)
	if im := claim(seen, slug(name), dir, fmt.Sprintf("the folder's name %q gives no task id (lower-case letters, digits, '.', '_' and '-', starting with a letter or digit); rename the folder", name)); im != nil {
		return *im, nil
	}
	d := newDraft(slug(name), dir)
	d.spec.Title = name
	d.spec.Source = FromMLAgentBench
	d.spec.Split = schemas.HeldIn
	d.spec.TimeLimitS = float64p(600)
	d.generated("task.yaml: title %q, split held-in and time_limit_s 600 are defaults: edit them", name)
	env, scripts := filepath.Join(dir, "env"), filepath.Join(dir, "scripts")

	problem, err := readSource(scripts, "research_problem.txt", maxSourceBytes)
	if err != nil {
		d.incomplete("scripts/%v", err)
	}
	d.description = "# " + name + "\n\n" + strings.TrimSpace(string(problem)) + "\n"

	// Workspace: env/ as is, except train.py (see below).
	if st, err := os.Stat(env); err != nil || !st.IsDir() {
		d.incomplete("env/: missing; run the task's scripts/prepare.py, which downloads the data into env/, then import again")
	} else {
		files, refused, err := filesUnder(env)
		switch {
		case err != nil:
			d.incomplete("env/: %v", err)
		case len(refused) > 0:
			d.incomplete("%s", notCopied("env/", refused))
		}
		for _, f := range files {
			d.workspace[f] = filepath.Join(env, f)
		}
		if d.spec.Modality = modalityOf(env); d.spec.Modality == "" && err == nil {
			d.missing("task.yaml modality: env/ holds non-CSV files; set modality (image, text, graph, ...)")
		}
	}

	// Hidden answers: what prepare.py left in scripts/.
	answers, refused := "", false
	for _, cand := range []string{"answer.csv", "answers.csv", "test_answer.csv", "test_labels.csv"} {
		p, err := sourceFile(scripts, cand)
		if err == nil {
			answers = p
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			d.incomplete("scripts/%v", err)
			refused = true
			break
		}
	}
	switch {
	case answers != "":
		d.private[tasks.AnswersFile] = answers
	case !refused:
		d.incomplete("scripts/answer.csv: missing; run the task's scripts/prepare.py (it writes the hidden test labels there), then import again")
	}

	// Metric from eval.py; the grader is generated, eval.py kept for reference.
	var m metricInfo
	known := false
	if b, err := readSource(scripts, "eval.py", maxSourceBytes); err == nil {
		d.private["eval.py"] = filepath.Join(scripts, "eval.py")
		if name, ok := metricFromCode(string(b)); ok {
			m, known = lookupMetric(name)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		d.missing("scripts/%v", err)
	}
	if known {
		d.spec.Metric, d.spec.Direction = m.name, m.direction
		d.generated("task.yaml metric %s (%s is better): inferred from scripts/eval.py, check it", m.name, m.direction)
	} else {
		d.missing("task.yaml metric and direction: could not infer the metric from scripts/eval.py; set metric and direction (higher|lower), and write private/grade.py")
	}
	var idCol string
	var targets []string
	if answers != "" {
		if h, err := csvHeader(answers); err == nil && len(h) >= 2 {
			idCol, targets = h[0], h[1:]
		} else {
			d.missing("private/answers.csv: want an id column then the target column(s)")
		}
	}
	if idCol != "" {
		d.refuseAnswerLeaks("env/", "scripts/"+filepath.Base(answers), answers, idCol, targets)
	}
	if known && idCol != "" {
		if err := d.addGrader(idCol, targets, m.name); err != nil {
			return Imported{}, err
		}
		d.spec.TaskType = taskType(m, answers, targets)
		d.description += fmt.Sprintf(workspaceNote, m.name, strings.Join(append([]string{idCol}, targets...), ", "), directionWord(m.direction))
	}
	if d.spec.TaskType == "" {
		d.missing("task.yaml task_type: set binary-classification, multiclass-classification, regression, ...")
	}
	d.noBest("MLAgentBench publishes no best score", opts)

	// Initial script: keep env/train.py if it already follows the format.
	orig, err := readSource(env, tasks.ScriptFile, maxSourceBytes)
	if err == nil && strings.Contains(string(orig), "# === end evaluate ===") && strings.Contains(string(orig), tasks.ValMetricPrefix) {
		return d.write(dst)
	}
	if opts.Initial == schemas.InitialOriginal {
		d.originalScript(env, idCol, targets, m, known, err == nil)
		return d.write(dst)
	}
	if err == nil {
		delete(d.workspace, tasks.ScriptFile)
		d.workspace["train_original.py"] = filepath.Join(env, tasks.ScriptFile)
	}
	before := len(d.im.Missing)
	d.baseline(env, idCol, targets, m, known, "MLAgentBench's train.py has no sections and prints no VAL_METRIC line")
	if len(d.im.Missing) > before && err == nil {
		// No generated baseline: keep the original where the format expects it.
		delete(d.workspace, "train_original.py")
		d.workspace[tasks.ScriptFile] = filepath.Join(env, tasks.ScriptFile)
	} else if err == nil {
		d.generated("workspace/train_original.py: MLAgentBench's own train.py, kept for reference")
	}
	return d.write(dst)
}

// originalScript keeps MLAgentBench's own env/train.py as the initial
// script (initial: original, for an LLM editor) and, when the data allows
// it, puts the generated sectioned baseline in private/train_sectioned.py
// for --m_best measure's catalog search, which edits sections.
func (d *draft) originalScript(env, idCol string, targets []string, m metricInfo, known, found bool) {
	if !found {
		d.missing("workspace/train.py: env/ has no train.py to start from; import with --initial %s for the generated baseline", schemas.InitialGenerated)
		return
	}
	d.spec.Initial = schemas.InitialOriginal
	d.generated("workspace/train.py: MLAgentBench's own (initial: %s): an LLM editor edits it, the offline catalog editor cannot (it has no sections); it must run as it is, to measure m_init", schemas.InitialOriginal)
	written := d.written[tasks.WorkspaceDir+"/"+tasks.ScriptFile]
	before, gen := len(d.im.Missing), len(d.im.Generated)
	d.baseline(env, idCol, targets, m, known, "MLAgentBench's train.py has no sections")
	sectioned, ok := d.written[tasks.WorkspaceDir+"/"+tasks.ScriptFile]
	// What baseline wrote or said is about the sectioned copy, not the
	// workspace: move it to private/, and drop its lines.
	d.written[tasks.WorkspaceDir+"/"+tasks.ScriptFile] = written
	if written == nil {
		delete(d.written, tasks.WorkspaceDir+"/"+tasks.ScriptFile)
	}
	d.im.Missing, d.im.Generated = d.im.Missing[:before], d.im.Generated[:gen]
	if ok {
		d.written[tasks.PrivateDir+"/"+sectionedFile] = sectioned
		d.generated("%s/%s: the generated sectioned baseline, which --m_best %s's catalog search edits", tasks.PrivateDir, sectionedFile, tasks.MeasureMBest)
	}
}

// sectionedFile is, in private/ of a task whose train.py is the
// benchmark's own, the generated sectioned baseline the catalog search
// edits.
const sectionedFile = "train_sectioned.py"

// metricPatterns infer a metric from evaluation code, most specific first.
var metricPatterns = []struct {
	re     *regexp.Regexp
	metric string
}{
	{regexp.MustCompile(`(?i)roc_auc|auroc|\bauc\b`), "roc_auc"},
	{regexp.MustCompile(`(?i)log_loss|logloss|cross_entropy`), "log_loss"},
	{regexp.MustCompile(`(?i)mean_squared_log_error|rmsle`), "rmsle"},
	{regexp.MustCompile(`(?i)root_mean_squared|\brmse\b|sqrt\(\s*mean_squared_error`), "rmse"},
	{regexp.MustCompile(`(?i)mean_absolute_error|\bmae\b|sum\(\s*abs\(`), "mae"},
	{regexp.MustCompile(`(?i)mean_squared_error|\bmse\b`), "mse"},
	{regexp.MustCompile(`(?i)f1_score\([^)]*average\s*=\s*['"]macro`), "f1_macro"},
	{regexp.MustCompile(`(?i)f1_score\([^)]*average\s*=\s*['"]micro`), "f1_micro"},
	{regexp.MustCompile(`(?i)f1_score|\bf1\b`), "f1"},
	{regexp.MustCompile(`(?i)r2_score`), "r2"},
	{regexp.MustCompile(`(?i)accuracy|\bacc\b`), "accuracy"},
}

// metricFromCode guesses the metric an evaluation script computes.
func metricFromCode(src string) (string, bool) {
	for _, p := range metricPatterns {
		if p.re.MatchString(src) {
			return p.metric, true
		}
	}
	return "", false
}
