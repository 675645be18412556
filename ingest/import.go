package ingest

import (
	"bytes"
	"embed"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/mlerl/mlerl/internal/tasks"
)

//go:embed templates/grade.py templates/grade_mlebench.py templates/train_tabular.py
var templatesFS embed.FS

// Graders an MLE-bench import writes (ImportOptions.Grader).
const (
	// GraderCSV is the generated CSV grader (templates/grade.py) for the
	// common metrics: no dependency beyond pandas and scikit-learn.
	GraderCSV = "csv"
	// GraderMLEBench calls the competition's own grade_fn through the
	// mlebench package, which the user installs.
	GraderMLEBench = "mlebench"
)

// Imported is one converted task folder and what the importer could not
// take from the source layout.
type Imported struct {
	ID     string
	Dir    string // the task folder written (or found) under import_to
	Source string // the folder it came from
	// Generated lists what the importer wrote itself (a grader, a baseline).
	Generated []string
	// Missing lists what the task format needs and the layout lacked, each
	// with the file/field to add and how.
	Missing []string
	// Kept is set when Dir already existed and was left as it was.
	Kept bool
	// Err is set when the source itself is incomplete (its data is not
	// prepared): nothing is written then, so a later import starts afresh.
	Err error
}

// Report renders what the import did, for the stage's log.
func (im Imported) Report() string {
	var b strings.Builder
	if im.Err != nil {
		fmt.Fprintf(&b, "import %s: not imported: %v\n", im.ID, im.Err)
		return b.String()
	}
	if im.Kept {
		fmt.Fprintf(&b, "import %s: %s already exists, ingesting it as it is (delete it to import %s again)\n", im.ID, im.Dir, im.Source)
		return b.String()
	}
	fmt.Fprintf(&b, "import %s: %s -> %s\n", im.ID, im.Source, im.Dir)
	for _, g := range im.Generated {
		fmt.Fprintf(&b, "  generated: %s\n", g)
	}
	for _, m := range im.Missing {
		fmt.Fprintf(&b, "  MISSING:   %s\n", m)
	}
	return b.String()
}

// ImportOptions are the settings of some importers.
type ImportOptions struct {
	// MLEBenchData is MLE-bench's data folder (its --data-dir, holding
	// <id>/prepared/): where competitions' prepared data is looked for
	// after their own folders ("": not looked in).
	MLEBenchData string
	// MeasureMBest writes `m_best: measure` into a task.yaml whose source
	// has no best score (no leaderboard, or a Git LFS pointer in its
	// place), for the ingest stage's catalog search, instead of listing
	// m_best as missing.
	MeasureMBest bool
	// Grader is the grader an MLE-bench import writes: GraderCSV ("" too)
	// or GraderMLEBench.
	Grader string
	// Initial is the initial train.py of an MLAgentBench import:
	// schemas.InitialGenerated ("" too: the generated sectioned baseline,
	// which the offline editor needs) or schemas.InitialOriginal (the
	// benchmark's own, for an LLM editor).
	Initial string
}

// Import converts every task of source (in layout from) into task folders
// under dst and returns one Imported per task found. A task folder that
// already exists under dst is kept as it is, so that fields added by hand
// (m_best, a grader) survive a rerun.
func Import(from, source, dst string, opts ImportOptions) ([]Imported, error) {
	switch from {
	case FromMLEBench:
		return ImportMLEBench(source, dst, opts)
	case FromMLAgentBench:
		return ImportMLAgentBench(source, dst, opts)
	}
	return nil, fmt.Errorf("no importer for %q", from)
}

// metricInfo is a metric the generated grader computes.
type metricInfo struct {
	name      string // our metric name
	direction string
	classify  bool // labels (not numbers) are predicted
}

// graderMetrics maps MLE-bench grader names (config.yaml grader.name) and
// our own names to the metrics the generated grader supports.
var graderMetrics = map[string]string{
	"accuracy": "accuracy", "multi-class-classification-accuracy": "accuracy", "classification-accuracy": "accuracy",
	"top-1-classification-error": "error_rate", "error_rate": "error_rate",
	"auc-roc": "roc_auc", "auc": "roc_auc", "roc-auc": "roc_auc", "roc_auc": "roc_auc", "auroc": "roc_auc",
	"mean-column-wise-roc-auc": "roc_auc", "column-wise roc auc": "roc_auc", "auroc-multi-label": "roc_auc",
	"log-loss": "log_loss", "logloss": "log_loss", "log_loss": "log_loss", "multi-class-log-loss": "log_loss",
	"f1-score": "f1", "f1": "f1", "macro-f1-score": "f1_macro", "f1_macro": "f1_macro", "micro-f1-score": "f1_micro", "f1_micro": "f1_micro",
	"root-mean-squared-error": "rmse", "root_mean_squared_error": "rmse", "rmse": "rmse",
	"mean-squared-error": "mse", "mse": "mse",
	"mean-absolute-error": "mae", "mae": "mae",
	"mean-column-wise-rmsle": "rmsle", "rmsle": "rmsle", "root-mean-squared-log-error": "rmsle",
	"r2": "r2", "quadratic-weighted-kappa": "qwk", "qwk": "qwk",
	"matthews-correlation-coefficient": "mcc", "mcc": "mcc",
	"pearson-correlation-coefficient": "pearson", "pearson": "pearson",
}

var classifyMetrics = map[string]bool{"accuracy": true, "error_rate": true, "roc_auc": true, "log_loss": true,
	"f1": true, "f1_macro": true, "f1_micro": true, "mcc": true, "qwk": true}

// lookupMetric maps a grader or metric name to a metric the generated
// grader computes.
func lookupMetric(name string) (metricInfo, bool) {
	m, ok := graderMetrics[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return metricInfo{}, false
	}
	d, _ := tasks.KnownDirection(m)
	return metricInfo{name: m, direction: d, classify: classifyMetrics[m]}, true
}

// draft is a task folder being assembled by an importer.
type draft struct {
	spec        tasks.Spec
	description string
	workspace   map[string]string // dst relative to workspace/ -> source file
	private     map[string]string // dst relative to private/ -> source file
	written     map[string][]byte // generated files, relative to the task folder
	im          Imported
	broken      bool // the source is incomplete: write nothing
}

func newDraft(id, source string) *draft {
	return &draft{
		spec:      tasks.Spec{ID: id},
		workspace: map[string]string{}, private: map[string]string{}, written: map[string][]byte{},
		im: Imported{ID: id, Source: source},
	}
}

func (d *draft) missing(format string, args ...any) {
	d.im.Missing = append(d.im.Missing, fmt.Sprintf(format, args...))
}

// incomplete records a fault of the source that the task folder cannot
// fix: the draft is then not written.
func (d *draft) incomplete(format string, args ...any) {
	d.im.Missing = append(d.im.Missing, fmt.Sprintf(format, args...))
	d.broken = true
}

func (d *draft) generated(format string, args ...any) {
	d.im.Generated = append(d.im.Generated, fmt.Sprintf(format, args...))
}

// noBest records that the source has no best score (why): m_best is to be
// measured when opts say so, else missing.
func (d *draft) noBest(why string, opts ImportOptions) {
	if opts.MeasureMBest {
		d.spec.MBestMeasure = true
		d.generated("task.yaml m_best: %s (%s): the catalog search measures it at ingest and records how in m_best_source", tasks.MeasureMBest, why)
		return
	}
	d.missing("task.yaml m_best and m_best_source: %s; add the best known score for %s and where it comes from, or import with --m_best %s to have the catalog search measure it", why, d.spec.Metric, tasks.MeasureMBest)
}

// write materialises the draft as dst/<id>, unless that folder exists.
// It writes into a temporary sibling first so a crash never leaves half a
// task folder.
func (d *draft) write(dst string) (Imported, error) {
	dir := filepath.Join(dst, d.spec.ID)
	d.im.Dir = dir
	if d.broken {
		d.im.Err = &tasks.Error{Task: d.spec.ID, File: d.im.Source, Msg: strings.Join(d.im.Missing, "; ")}
		return d.im, nil
	}
	if _, err := os.Stat(dir); err == nil {
		d.im.Kept = true
		return d.im, nil
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return d.im, err
	}
	tmp, err := os.MkdirTemp(dst, "."+d.spec.ID+"-")
	if err != nil {
		return d.im, err
	}
	defer os.RemoveAll(tmp)
	for rel, src := range d.workspace {
		if err := copyFile(src, filepath.Join(tmp, tasks.WorkspaceDir, rel)); err != nil {
			return d.im, err
		}
	}
	for rel, src := range d.private {
		if err := copyFile(src, filepath.Join(tmp, tasks.PrivateDir, rel)); err != nil {
			return d.im, err
		}
	}
	d.written[tasks.SpecFile] = d.specYAML()
	d.written[tasks.DescriptionFile] = []byte(d.description)
	for rel, b := range d.written {
		p := filepath.Join(tmp, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return d.im, err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return d.im, err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return d.im, err
	}
	return d.im, nil
}

// specYAML renders task.yaml, with a comment in place of each field the
// importer could not fill, so the user sees where to add it.
func (d *draft) specYAML() []byte {
	s := d.spec
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Imported by `mlerl ingest tasks --from %s` from %s.\n", s.Source, d.im.Source)
	if len(d.im.Missing) > 0 {
		b.WriteString("# Still missing (see the MISSING lines of the import log):\n")
		for _, m := range d.im.Missing {
			fmt.Fprintf(&b, "#   - %s\n", m)
		}
	}
	field := func(key string, v any, ok bool) {
		if !ok {
			fmt.Fprintf(&b, "# %s: <fill in>\n", key)
			return
		}
		out, _ := yaml.Marshal(map[string]any{key: v})
		b.Write(out)
	}
	field("id", s.ID, true)
	field("title", s.Title, s.Title != "")
	field("modality", s.Modality, s.Modality != "")
	field("task_type", s.TaskType, s.TaskType != "")
	field("metric", s.Metric, s.Metric != "")
	field("direction", s.Direction, s.Direction != "")
	switch {
	case s.MBest != nil:
		field("m_best", *s.MBest, true)
	case s.MBestMeasure:
		field("m_best", tasks.MeasureMBest, true)
	default:
		field("m_best", nil, false)
	}
	if s.MBestMeasure && s.MBestSource == "" {
		b.WriteString("# m_best_source: recorded by the catalog search at ingest\n")
	} else {
		field("m_best_source", s.MBestSource, s.MBestSource != "")
	}
	if s.TimeLimitS != nil {
		field("time_limit_s", *s.TimeLimitS, true)
	}
	field("split", s.Split, s.Split != "")
	if s.TaskType != "" {
		// The hidden answers' public and private parts: computed at ingest
		// by this rule (internal/tasks split.go) into private/parts.csv.
		rule := tasks.DefaultSplitRule(s.TaskType)
		field("answer_split", rule, true)
		if rule == tasks.SplitStrataHash {
			field("answer_split_seed", tasks.DefaultSplitSeed, true)
		}
	}
	field("source", s.Source, true)
	if s.Initial != "" {
		field("initial", s.Initial, true)
	}
	return b.Bytes()
}

// workspaceNote is appended to every imported description.
const workspaceNote = `

## Working in this task (mlerl)

Your working directory holds the data files and train.py. train.py must
print the validation metric exactly once, on a line ` + "`VAL_METRIC %s <value>`" + `,
and write submission.csv in this folder with the columns %s (one row per
test id). The hidden test labels are scored by the grader; %s is better.
`

// tabularBaseline renders the generic sectioned train.py.
func tabularBaseline(metric, target, id, trainFile, testFile string, classify bool) ([]byte, error) {
	src, err := templatesFS.ReadFile("templates/train_tabular.py")
	if err != nil {
		return nil, err
	}
	t, err := template.New("train.py").Delims("[[", "]]").Parse(string(src))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = t.Execute(&b, map[string]any{
		"Metric": metric, "Target": target, "ID": id, "TrainFile": trainFile, "TestFile": testFile,
		"Classify": classify, "Proba": metric == "roc_auc" || metric == "log_loss",
	})
	return b.Bytes(), err
}

// baselineMetrics are the metrics the generic baseline computes.
var baselineMetrics = map[string]bool{"accuracy": true, "error_rate": true, "roc_auc": true, "log_loss": true,
	"f1": true, "f1_macro": true, "f1_micro": true, "mcc": true,
	"rmse": true, "mse": true, "mae": true, "rmsle": true, "r2": true}

// addGrader adds the generated CSV grader for metric to d's private files.
func (d *draft) addGrader(idColumn string, targets []string, metric string) error {
	src, err := templatesFS.ReadFile("templates/grade.py")
	if err != nil {
		return err
	}
	cfg, _ := json.MarshalIndent(map[string]any{"id_column": idColumn, "target_columns": targets, "metric": metric}, "", "  ")
	d.written[tasks.PrivateDir+"/"+tasks.GraderFile] = src
	d.written[tasks.PrivateDir+"/grade.json"] = append(cfg, '\n')
	d.generated("private/grade.py: CSV grader for metric %s on column(s) %s keyed by %s (settings in private/grade.json)", metric, strings.Join(targets, ", "), idColumn)
	return nil
}

// csvHeader reads the first record of a CSV file.
func csvHeader(path string) ([]string, error) {
	f, err := openSource(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	h, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s is empty", path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range h {
		h[i] = strings.TrimSpace(strings.TrimPrefix(h[i], "\ufeff"))
	}
	return h, nil
}

// distinctValues counts the distinct values of column col in a CSV file
// (reading at most 200,000 rows), and whether they are all numbers.
func distinctValues(path, col string) (n int, numeric bool, err error) {
	f, err := openSource(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	h, err := r.Read()
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", path, err)
	}
	idx := -1
	for i, c := range h {
		if strings.TrimSpace(strings.TrimPrefix(c, "\ufeff")) == col {
			idx = i
		}
	}
	if idx < 0 {
		return 0, false, fmt.Errorf("%s has no column %q", path, col)
	}
	seen := map[string]bool{}
	numeric = true
	for rows := 0; rows < 200000; rows++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", path, err)
		}
		if idx < len(rec) {
			v := strings.TrimSpace(rec[idx])
			seen[v] = true
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				numeric = false
			}
		}
	}
	return len(seen), numeric, nil
}

// taskType guesses task_type from the metric and the target columns: one
// column of labels is binary or multiclass by its number of distinct
// values; several columns are per-class probabilities (log loss) or
// labels (multi-label).
func taskType(m metricInfo, answers string, targets []string) string {
	switch {
	case !m.classify:
		return "regression"
	case len(targets) > 1 && m.name == "log_loss":
		return "multiclass-classification"
	case len(targets) > 1:
		return "multilabel-classification"
	}
	if n, _, err := distinctValues(answers, targets[0]); err == nil && n > 2 {
		return "multiclass-classification"
	}
	return "binary-classification"
}

// modalityOf says "tabular" when every file of dir is a CSV/TSV/TXT file.
func modalityOf(dir string) string {
	tabular := true
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".csv", ".tsv", ".txt", ".md", ".py":
		default:
			tabular = false
		}
		return nil
	})
	if tabular {
		return "tabular"
	}
	return ""
}

var slugRe = regexp.MustCompile(`[^a-z0-9_.-]+`)

// slug turns a benchmark's name into a task id.
func slug(s string) string {
	return strings.Trim(slugRe.ReplaceAllString(strings.ToLower(s), "-"), "-.")
}

// copyFile copies src to dst, creating dst's folder. src must be a
// regular file (it is opened without blocking, so a named pipe put in its
// place meanwhile is refused, not waited on).
func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := openRegular(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// A source tree is not trusted to be tidy: a checkout can hold symbolic
// links (to the host's files, to the hidden answers, in a loop), named
// pipes (which block whoever opens them) and devices (which never end).
// The importers read and copy source files only through filesUnder,
// sourceFile, openSource and readSource, which follow a link only to a
// regular file inside the folder being read and open nothing but regular
// files, without blocking.

// maxSourceBytes bounds a source file an importer reads whole
// (description.md, research_problem.txt, eval.py, train.py).
const maxSourceBytes = 16 << 20

// maxConfigBytes bounds a config.yaml read while searching for
// competitions (MLE-bench's are under 1 KiB).
const maxConfigBytes = 1 << 20

// fileKind names what a file that is not regular is, for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a folder"
	}
	return "not a regular file"
}

// inside reports whether path p is root or below it (both resolved).
func inside(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// sourceFile resolves rel inside the source folder root to the regular
// file it names, to read or copy. A symbolic link (rel or a folder on its
// path) is followed only to a regular file inside root: a link out of
// root, a dangling one, a loop, a folder, a named pipe or a device is an
// error that names rel, says what it is and how to fix it. A missing file
// wraps fs.ErrNotExist.
func sourceFile(root, rel string) (string, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, rel)
	lst, err := os.Lstat(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", rel, fs.ErrNotExist)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		target, _ := os.Readlink(p)
		return "", fmt.Errorf("%s is a symbolic link to %s, which leads nowhere (%v); put the file itself there", rel, target, err)
	}
	if real != p {
		realRoot, err := filepath.EvalSymlinks(root)
		if err != nil {
			return "", fmt.Errorf("%s: %w", root, err)
		}
		if !inside(realRoot, real) {
			return "", fmt.Errorf("%s is a symbolic link to %s, outside %s; links are followed only inside the folder: put the file itself there", rel, real, root)
		}
	}
	st, err := os.Lstat(real)
	if err != nil {
		return "", fmt.Errorf("%s: %v", rel, err)
	}
	if !st.Mode().IsRegular() {
		what := fileKind(st.Mode())
		if lst.Mode()&fs.ModeSymlink != 0 {
			what = "a symbolic link to " + what
		}
		return "", fmt.Errorf("%s is %s, not a regular file: put the file itself there", rel, what)
	}
	return real, nil
}

// openRegular opens p, which must be a regular file, for reading without
// blocking: a named pipe or a device is refused, not opened for good.
func openRegular(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is %s, not a regular file", p, fileKind(st.Mode()))
	}
	return f, nil
}

// openSource opens the regular file rel of the source folder root for
// reading (see sourceFile for what it refuses).
func openSource(root, rel string) (*os.File, error) {
	real, err := sourceFile(root, rel)
	if err != nil {
		return nil, err
	}
	return openRegular(real)
}

// readSource reads the regular file rel of the source folder root (see
// sourceFile), refusing one of more than limit bytes.
func readSource(root, rel string, limit int64) ([]byte, error) {
	f, err := openSource(root, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", rel, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d MiB; is it the right file?", rel, limit>>20)
	}
	return b, nil
}

// filesUnder lists the files under the data folder dir to copy, relative
// and sorted, and what it will not copy, each with why: a symbolic link
// to anything but a regular file inside dir (to the host's files, to the
// hidden answers beside public/, to a folder, in a loop), a named pipe, a
// device or a socket. dir itself must be a folder, not a link to one (a
// link would make any folder of the host the data); the error says so, or
// that dir cannot be read.
func filesUnder(dir string) (files, refused []string, err error) {
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, nil, err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(dir)
		return nil, nil, fmt.Errorf("%s is a symbolic link to %s; links are not followed into data folders: put the folder itself there", dir, target)
	}
	realDir, err := filepath.EvalSymlinks(dir) // a link above dir is the user's choice
	if err == nil {
		realDir, err = filepath.Abs(realDir)
	}
	if err != nil {
		return nil, nil, err
	}
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch t := e.Type(); {
		case t.IsRegular():
			files = append(files, rel)
		case t.IsDir():
		case t&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			real, err := filepath.EvalSymlinks(p)
			if err == nil {
				real, err = filepath.Abs(real)
			}
			switch {
			case err != nil:
				refused = append(refused, fmt.Sprintf("%s (a symbolic link that leads nowhere: %s)", rel, target))
			case !inside(realDir, real):
				refused = append(refused, fmt.Sprintf("%s (a symbolic link to %s, outside the folder)", rel, target))
			default:
				if st, err := os.Lstat(real); err != nil || !st.Mode().IsRegular() {
					what := "an unreadable file"
					if err == nil {
						what = fileKind(st.Mode())
					}
					refused = append(refused, fmt.Sprintf("%s (a symbolic link to %s)", rel, what))
				} else {
					files = append(files, rel)
				}
			}
		default:
			refused = append(refused, fmt.Sprintf("%s (%s)", rel, fileKind(t)))
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("cannot be read: %w", err)
	}
	sort.Strings(files)
	return files, refused, nil
}

// notCopied renders filesUnder's refusals as one missing-file line for
// the data folder named (prepared/public/, env/).
func notCopied(folder string, refused []string) string {
	list := refused
	if len(list) > 5 {
		list = append(list[:5:5], fmt.Sprintf("and %d more", len(refused)-5))
	}
	return fmt.Sprintf("%s: %s not copied; a task's data must be regular files of the folder itself: replace each by the file it stands for (or delete it), then import again", folder, strings.Join(list, ", "))
}

// claim records that source gives task id in this import run. It refuses
// an id that cannot name a task folder (why names where it came from and
// how to fix it), and a second source with an id already claimed (the
// same task found twice, or two names that are one id once normalised),
// which would otherwise pass for the first one's folder; either way the
// Imported it returns (nil when the id is free) is not to be written.
func claim(seen map[string]string, id, source, why string) *Imported {
	if !taskIDRe.MatchString(id) {
		name := id
		if name == "" {
			name = filepath.Base(source)
		}
		return &Imported{ID: name, Source: source, Err: &tasks.Error{Task: name, File: source, Msg: why}}
	}
	if prev, ok := seen[id]; ok {
		return &Imported{ID: id, Source: source, Err: &tasks.Error{Task: id, File: source,
			Msg: fmt.Sprintf("task id %s is also the id of %s, imported in this run: the same task found twice, or two names that give one id once lower-cased; import from a folder that holds only one of them, or rename one", id, prev)}}
	}
	seen[id] = source
	return nil
}

// taskIDRe is what a task id may be (as internal/tasks checks task.yaml).
var taskIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

func float64p(v float64) *float64 { return &v }

// maxLeakCheckBytes bounds what refuseAnswerLeaks reads of one public
// file (a data file larger than this is not compared).
const maxLeakCheckBytes = 1 << 30

// refuseAnswerLeaks marks the draft incomplete when a public file (one of
// d.workspace, from the source folder named folder) holds the hidden
// answers (the file answers, named answersName in messages): a copy of the answers file, or a CSV with the id column and
// the target columns whose values are the answers' own for every test
// id (labels left in the public data by a preparer, a copy made by
// hand). A script could copy such a file to submission.csv and score
// perfectly without learning anything. A file that merely shares the
// columns (a sample submission of constant guesses, train.csv with other
// ids) is not one; neither is anything when the answers' targets take a
// single value, where a constant guess would match them all.
func (d *draft) refuseAnswerLeaks(folder, answersName, answers, idCol string, targets []string) {
	want, err := readAnswers(answers, idCol, targets)
	if err != nil {
		want = nil // the grader's checks report an answers file without these columns
	}
	raw, _ := readSource(filepath.Dir(answers), filepath.Base(answers), maxLeakCheckBytes)
	if len(raw) == 0 {
		raw = nil
	}
	distinct := map[string]bool{}
	for _, v := range want {
		distinct[v] = true
	}
	for _, rel := range slices.Sorted(maps.Keys(d.workspace)) {
		src := d.workspace[rel]
		leak := false
		if st, err := os.Stat(src); err == nil && raw != nil && st.Size() == int64(len(raw)) {
			if b, err := readSource(filepath.Dir(src), filepath.Base(src), maxLeakCheckBytes); err == nil && bytes.Equal(b, raw) {
				leak = true
			}
		}
		if !leak && len(distinct) > 1 && strings.EqualFold(filepath.Ext(rel), ".csv") {
			leak = holdsAnswers(src, idCol, targets, want)
		}
		if leak {
			d.incomplete("%s%s: holds the hidden answers (the %s of every test id, as %s has them); a script could copy it to submission.csv and score without learning: remove it from %s (or strip its %s column), then import again",
				folder, rel, strings.Join(targets, ", "), answersName, folder, strings.Join(targets, ", "))
		}
	}
}

// readAnswers maps each id of the answers file to its target values
// (joined by a NUL, each trimmed).
func readAnswers(path, idCol string, targets []string) (map[string]string, error) {
	out := map[string]string{}
	err := eachRow(path, idCol, targets, func(id, vals string) bool {
		out[id] = vals
		return true
	})
	return out, err
}

// holdsAnswers reports whether the CSV file path has the columns idCol
// and targets with want's values for every id of want.
func holdsAnswers(path, idCol string, targets []string, want map[string]string) bool {
	matched := map[string]bool{}
	err := eachRow(path, idCol, targets, func(id, vals string) bool {
		if w, ok := want[id]; ok {
			if w != vals {
				return false
			}
			matched[id] = true
		}
		return true
	})
	return err == nil && len(matched) == len(want)
}

// errNoColumns: the file lacks a column eachRow needs.
var errNoColumns = errors.New("columns missing")

// eachRow calls f with the trimmed id and the NUL-joined trimmed target
// values of each row of the CSV file path (read through openSource, at
// most maxLeakCheckBytes), until f returns false.
func eachRow(path, idCol string, targets []string, f func(id, vals string) bool) error {
	fh, err := openSource(filepath.Dir(path), filepath.Base(path))
	if err != nil {
		return err
	}
	defer fh.Close()
	r := csv.NewReader(io.LimitReader(fh, maxLeakCheckBytes))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	h, err := r.Read()
	if err != nil {
		return err
	}
	col := map[string]int{}
	for i, c := range h {
		col[strings.TrimSpace(strings.TrimPrefix(c, "\ufeff"))] = i
	}
	idx := []int{}
	for _, c := range append([]string{idCol}, targets...) {
		i, ok := col[c]
		if !ok {
			return errNoColumns
		}
		idx = append(idx, i)
	}
	vals := make([]string, len(targets))
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if idx[0] >= len(rec) {
			continue
		}
		for k, i := range idx[1:] {
			vals[k] = ""
			if i < len(rec) {
				vals[k] = strings.TrimSpace(rec[i])
			}
		}
		if !f(strings.TrimSpace(rec[idx[0]]), strings.Join(vals, "\x00")) {
			return nil
		}
	}
}
