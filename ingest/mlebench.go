package ingest

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/schemas"
)

// mleConfig is the part of an MLE-bench competition's config.yaml the
// importer reads.
type mleConfig struct {
	ID              string `yaml:"id"`
	Name            string `yaml:"name"`
	CompetitionType string `yaml:"competition_type"`
	Description     string `yaml:"description"`
	Dataset         struct {
		Answers          string `yaml:"answers"`
		SampleSubmission string `yaml:"sample_submission"`
	} `yaml:"dataset"`
	Grader struct {
		Name    string `yaml:"name"`
		GradeFn string `yaml:"grade_fn"`
	} `yaml:"grader"`
}

// ImportMLEBench converts MLE-bench competitions into task folders under
// dst (see [ImportOptions] for the choices). source is one competition
// folder (holding config.yaml), a folder
// of them, or any folder above them such as the MLE-bench repository's
// root (competitions are in mlebench/competitions/<id>/): it is searched
// at any depth (see [findDirs] for the bounds). A competition folder holds
// config.yaml (with an id and a grader or dataset), description.md, an
// optional leaderboard.csv (score column, best first); its prepared data
// (public/ and private/) is looked for, in order, in the competition
// folder (prepared/, or public/ and private/ directly), in
// data/<id>/prepared beside the folder or one of its parents, in
// data/<id>/prepared (data is MLE-bench's --data-dir; "": skipped), and in
// MLE-bench's cache, <user cache>/mle-bench/data/<id>/prepared. The
// public files become the workspace, the answers named by config.yaml's
// dataset.answers become private/answers.csv, and the metric comes from
// grader.name. MLE-bench's grade.py imports the mlebench package, so a
// CSV grader is generated for the common metrics instead; m_best is the
// leaderboard's top score and the direction follows the leaderboard's
// order. Whatever cannot be derived is listed in Imported.Missing. The
// source is not trusted to be tidy (see [sourceFile] and [filesUnder]): a
// link out of a folder, a named pipe or a device is never copied or
// waited on, a config.yaml id that is a path is refused, and a second
// competition with an id already imported in the run is not imported;
// each is named in its task's Imported.
func ImportMLEBench(source, dst string, opts ImportOptions) ([]Imported, error) {
	comps, err := findDirs(source, isCompetition)
	if err != nil {
		return nil, fmt.Errorf("mlebench source: %w", err)
	}
	if len(comps) == 0 {
		own := ""
		if _, err := os.Lstat(filepath.Join(source, "config.yaml")); err == nil {
			// One competition's folder given: say what its config.yaml lacks.
			own = fmt.Sprintf(" (its own config.yaml %s)", configProblem(source))
		}
		return nil, fmt.Errorf("mlebench source %s: no competition folder (one holding a config.yaml with an id and a grader) in it%s or below it, down to %d levels (%s); give MLE-bench's repository, its mlebench/competitions folder or one competition's folder", source, own, searchDepth, searchSkips)
	}
	var out []Imported
	seen := map[string]string{} // task id -> the competition folder that gave it
	for _, dir := range comps {
		im, err := importMLEBenchOne(dir, dst, opts, seen)
		if err != nil {
			return nil, fmt.Errorf("mlebench competition %s: %w", dir, err)
		}
		out = append(out, im)
	}
	return out, nil
}

// isCompetition reports whether dir holds an MLE-bench competition's
// config.yaml: the repository holds other config.yaml files (agents').
func isCompetition(dir string) bool {
	return configProblem(dir) == ""
}

// configProblem says why dir's config.yaml is not an MLE-bench
// competition's ("" when it is one).
func configProblem(dir string) string {
	b, err := readSource(dir, "config.yaml", maxConfigBytes)
	if err != nil {
		return "cannot be read: " + err.Error()
	}
	var cfg mleConfig
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return "is not valid YAML: " + err.Error()
	}
	switch {
	case cfg.ID == "":
		return "has no id"
	case cfg.Grader.Name == "" && cfg.Dataset.Answers == "":
		return "has neither grader.name nor dataset.answers"
	}
	return ""
}

// preparedDirs lists, best first, where the prepared data of competition
// id, found in dir, may be: each holds public/ and private/.
func preparedDirs(dir, data, id string) []string {
	out := []string{filepath.Join(dir, "prepared"), dir}
	// MLE-bench's repository with the data prepared beside the code:
	// competitions/<id>/ next to data/<id>/prepared/, or a few levels up.
	for up, p := 0, filepath.Dir(dir); up < 4; up, p = up+1, filepath.Dir(p) {
		out = append(out, filepath.Join(p, "data", id, "prepared"))
		if p == filepath.Dir(p) {
			break
		}
	}
	if data != "" {
		out = append(out, filepath.Join(data, id, "prepared"))
	}
	if cache, err := os.UserCacheDir(); err == nil {
		// `mlebench prepare` writes there unless given --data-dir.
		out = append(out, filepath.Join(cache, "mle-bench", "data", id, "prepared"))
	}
	return out
}

// importMLEBenchOne converts the competition in dir; seen holds the task
// ids the import run has given so far (see [claim]).
func importMLEBenchOne(dir, dst string, opts ImportOptions, seen map[string]string) (Imported, error) {
	var cfg mleConfig
	b, err := readSource(dir, "config.yaml", maxConfigBytes)
	if err != nil {
		return Imported{}, err
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return Imported{}, fmt.Errorf("config.yaml: %v", err)
	}
	id := slug(cfg.ID)
	if id == "" {
		id = slug(filepath.Base(dir))
	}
	// The id names the folder of the prepared data (data/<id>/prepared):
	// one that is a path could lead the search for it anywhere.
	if cfg.ID == "." || cfg.ID == ".." || strings.ContainsAny(cfg.ID, "/\\\x00") {
		return Imported{ID: id, Source: dir, Err: &tasks.Error{Task: id, File: filepath.Join(dir, "config.yaml"), Field: "id",
			Msg: fmt.Sprintf("config.yaml id %q is a path, not a competition id; set it to the competition's id, the name of its folder in MLE-bench's data (e.g. spaceship-titanic)", cfg.ID)}}, nil
	}
	if im := claim(seen, id, dir, fmt.Sprintf("config.yaml id %q and the folder's name give no task id (lower-case letters, digits, '.', '_' and '-', starting with a letter or digit); set id in config.yaml, or rename the folder", cfg.ID)); im != nil {
		return *im, nil
	}
	d := newDraft(id, dir)
	d.spec.Title = cfg.Name
	if d.spec.Title == "" {
		d.spec.Title = id
	}
	d.spec.Source = FromMLEBench
	d.spec.Split = schemas.HeldIn
	d.spec.TimeLimitS = float64p(600)
	d.generated("task.yaml: split held-in and time_limit_s 600 are defaults: edit them (held-out keeps the task for evaluation)")

	// Data: the prepared public and private folders, from the first place
	// that has public/.
	dataID := cfg.ID
	if dataID == "" {
		dataID = filepath.Base(dir)
	}
	public, private := "", ""
	var looked []string
	for _, p := range preparedDirs(dir, opts.MLEBenchData, dataID) {
		looked = append(looked, filepath.Join(p, "public"))
		if public = firstDir(p, "public"); public != "" {
			private = firstDir(p, "private")
			break
		}
	}
	if public == "" {
		d.incomplete("prepared/public/: missing (looked in %s); run MLE-bench's `mlebench prepare -c %s` and give its data folder with --mlebench-data (`mlebench prepare` writes to ~/.cache/mle-bench/data unless given --data-dir), then import again", strings.Join(looked, ", "), dataID)
	} else {
		files, refused, err := filesUnder(public)
		switch {
		case err != nil:
			d.incomplete("prepared/public/: %v", err)
		case len(refused) > 0:
			d.incomplete("%s", notCopied("prepared/public/", refused))
		}
		for _, f := range files {
			d.workspace[f] = filepath.Join(public, f)
		}
		if d.spec.Modality = modalityOf(public); d.spec.Modality == "" && err == nil {
			d.missing("task.yaml modality: the public data is not only CSV files; set modality (image, text, audio, ...)")
		}
	}
	answers := ""
	answersName := filepath.Base(cfg.Dataset.Answers)
	if answersName == "." || answersName == "" || answersName == string(filepath.Separator) {
		answersName = "test.csv"
	}
	refused := false // the answers are there but not taken: said why
	if private != "" {
		if st, err := os.Lstat(private); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(private)
			d.incomplete("prepared/private/: %s is a symbolic link to %s; links are not followed into data folders: put the folder itself there", private, target)
			refused = true
		} else if p, err := sourceFile(private, answersName); err == nil {
			answers = p
			d.private[tasks.AnswersFile] = p
		} else if !errors.Is(err, fs.ErrNotExist) {
			d.incomplete("prepared/private/%v", err)
			refused = true
		}
	}
	if answers == "" && public != "" && !refused {
		d.incomplete("prepared/private/%s: missing beside %s (config.yaml dataset.answers); run `mlebench prepare -c %s`, then import again", answersName, public, dataID)
	}

	// Metric and direction: grader.name, cross-checked with the leaderboard.
	// With MLE-bench's own grader, a grader without a mapping still names
	// the metric; its direction then comes from the leaderboard.
	m, known := lookupMetric(cfg.Grader.Name)
	official := opts.Grader == GraderMLEBench
	switch {
	case known:
		d.spec.Metric, d.spec.Direction = m.name, m.direction
	case official && slug(cfg.Grader.Name) != "":
		d.spec.Metric = slug(cfg.Grader.Name)
	default:
		d.missing("task.yaml metric and direction: MLE-bench grader %q has no mapping; set metric and direction (higher|lower), and write private/grade.py (python3 private/grade.py <submission.csv> <answers.csv> prints {\"valid\": true, \"score\": x}) or import with --grader %s", cfg.Grader.Name, GraderMLEBench)
	}
	if best, dir2, n, err := leaderboardTop(filepath.Join(dir, "leaderboard.csv")); err == nil {
		d.spec.MBest = float64p(best)
		d.spec.MBestSource = fmt.Sprintf("MLE-bench leaderboard.csv: top of %d teams", n)
		if d.spec.Direction == "" {
			d.spec.Direction = dir2
		} else if dir2 != "" && dir2 != d.spec.Direction {
			d.missing("task.yaml direction: grader %s is %s-is-better but leaderboard.csv is ordered %s-is-better; check which is right", cfg.Grader.Name, d.spec.Direction, dir2)
		}
	} else {
		d.noBest(err.Error(), opts)
	}
	if official && d.spec.Metric != "" && d.spec.Direction == "" {
		d.missing("task.yaml direction: MLE-bench grader %q has no mapping and leaderboard.csv gives no order; set direction (higher|lower)", cfg.Grader.Name)
	}

	// Submission format from sample_submission.csv: id column then targets.
	var idCol string
	var targets []string
	sample := ""
	if public != "" {
		name := filepath.Base(cfg.Dataset.SampleSubmission)
		if name == "." || name == "" {
			name = "sample_submission.csv"
		}
		if p, err := sourceFile(public, name); err == nil {
			sample = p
		}
	}
	if sample == "" {
		d.missing("workspace/sample_submission.csv: none found; without it the submission columns are unknown, so write private/grade.py and workspace/train.py by hand")
	} else if h, err := csvHeader(sample); err != nil || len(h) < 2 {
		d.missing("workspace/%s: want an id column and at least one target column", filepath.Base(sample))
	} else {
		idCol, targets = h[0], h[1:]
	}
	if answers != "" && idCol != "" {
		d.refuseAnswerLeaks("prepared/public/", "prepared/private/"+answersName, answers, idCol, targets)
	}
	if official {
		d.addMLEBenchGrader(cfg)
		if known && idCol != "" && answers != "" {
			d.spec.TaskType = taskType(m, answers, targets)
		}
	} else if known && idCol != "" && answers != "" {
		if h, err := csvHeader(answers); err == nil && containsAll(h, append([]string{idCol}, targets...)) {
			if err := d.addGrader(idCol, targets, m.name); err != nil {
				return Imported{}, err
			}
			d.spec.TaskType = taskType(m, answers, targets)
		} else {
			d.missing("private/grade.py: answers %s lacks the sample submission's columns %s; write a grader by hand", filepath.Base(answers), strings.Join(append([]string{idCol}, targets...), ", "))
		}
	}
	if d.spec.TaskType == "" {
		d.missing("task.yaml task_type: set binary-classification, multiclass-classification, regression, ...")
	}

	// Description and an initial script.
	desc, err := readSource(dir, "description.md", maxSourceBytes)
	if errors.Is(err, fs.ErrNotExist) {
		d.missing("description.md: copy the competition's description.md into the task folder")
	} else if err != nil {
		d.missing("%v, or copy the competition's description.md into the task folder", err)
	}
	d.description = string(desc)
	if d.spec.Metric != "" && idCol != "" {
		d.description += fmt.Sprintf(workspaceNote, d.spec.Metric, strings.Join(append([]string{idCol}, targets...), ", "), directionWord(d.spec.Direction))
	}
	d.baseline(public, idCol, targets, m, known, "MLE-bench ships no initial script")
	return d.write(dst)
}

// baseline adds the generic tabular train.py when the data allows it, or
// says what to write.
func (d *draft) baseline(public, idCol string, targets []string, m metricInfo, known bool, why string) {
	metric := d.spec.Metric
	if metric == "" {
		metric = "<metric>"
	}
	explain := func(reason string) {
		d.missing("workspace/train.py: %s and %s; write a train.py with sections imports, data, model, training, evaluate that prints `VAL_METRIC %s <value>` and writes submission.csv", why, reason, metric)
	}
	switch {
	case public == "" || !known:
		explain("the data or metric is unknown")
		return
	case len(targets) != 1:
		explain(fmt.Sprintf("the submission has %d target columns (the generic baseline predicts one)", len(targets)))
		return
	case !baselineMetrics[m.name]:
		explain("the generic baseline does not compute " + m.name)
		return
	}
	trainFile, testFile := "train.csv", "test.csv"
	h, err := csvHeader(filepath.Join(public, trainFile))
	if err != nil || !containsAll(h, targets) {
		explain("train.csv with the target column " + targets[0] + " is missing")
		return
	}
	if !fileExists(filepath.Join(public, testFile)) {
		explain("test.csv is missing")
		return
	}
	src, err := tabularBaseline(m.name, targets[0], idCol, trainFile, testFile, m.classify)
	if err != nil {
		explain(err.Error())
		return
	}
	d.written[tasks.WorkspaceDir+"/"+tasks.ScriptFile] = src
	d.generated("workspace/train.py: generic sectioned baseline (%s, unscaled features) predicting %s from train.csv", map[bool]string{true: "LogisticRegression", false: "Ridge"}[m.classify], targets[0])
}

// addMLEBenchGrader makes private/grade.py MLE-bench's own grader: the
// competition's grade_fn called through the installed mlebench package
// (templates/grade_mlebench.py), with its settings in private/grade.json.
func (d *draft) addMLEBenchGrader(cfg mleConfig) {
	if !strings.Contains(cfg.Grader.GradeFn, ":") {
		d.missing("private/grade.py: config.yaml grader.grade_fn %q is not module:function (as mlebench.competitions.<id>.grade:grade); fix config.yaml, or import with --grader %s", cfg.Grader.GradeFn, GraderCSV)
		return
	}
	src, _ := templatesFS.ReadFile("templates/grade_mlebench.py")
	format := "csv"
	if strings.HasSuffix(cfg.Dataset.Answers, ".jsonl") {
		format = "jsonl"
	}
	b, _ := json.MarshalIndent(map[string]any{"competition": cfg.ID, "grade_fn": cfg.Grader.GradeFn, "answers": format}, "", "  ")
	d.written[tasks.PrivateDir+"/"+tasks.GraderFile] = src
	d.written[tasks.PrivateDir+"/grade.json"] = append(b, '\n')
	d.generated("private/grade.py: MLE-bench's own grader, calling %s through the mlebench package, which must be installed for the task interpreter (settings in private/grade.json)", cfg.Grader.GradeFn)
}

// leaderboardTop reads an MLE-bench leaderboard.csv (a score column, best
// team first) and returns the top score, the direction its order implies
// and the number of teams.
func leaderboardTop(path string) (float64, string, int, error) {
	f, err := openSource(filepath.Dir(path), filepath.Base(path))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, "", 0, fmt.Errorf("no leaderboard.csv (MLE-bench keeps it in Git LFS: run `git lfs pull`)")
	} else if err != nil {
		return 0, "", 0, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	h, err := r.Read()
	if err != nil {
		return 0, "", 0, fmt.Errorf("leaderboard.csv: %v", err)
	}
	col := -1
	for i, c := range h {
		if strings.TrimSpace(strings.TrimPrefix(c, "\ufeff")) == "score" {
			col = i
		}
	}
	if col < 0 {
		return 0, "", 0, fmt.Errorf("leaderboard.csv has no score column (is it a Git LFS pointer? run `git lfs pull`)")
	}
	var scores []float64
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, "", 0, fmt.Errorf("leaderboard.csv: %v", err)
		}
		if col < len(rec) {
			// A team without a score (NaN, empty) is no team to beat.
			if v, err := strconv.ParseFloat(strings.TrimSpace(rec[col]), 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
				scores = append(scores, v)
			}
		}
	}
	if len(scores) == 0 {
		return 0, "", 0, fmt.Errorf("leaderboard.csv has no scores")
	}
	dir := ""
	switch top, bottom := scores[0], scores[len(scores)-1]; {
	case top < bottom:
		dir = schemas.LowerIsBetter
	case top > bottom:
		dir = schemas.HigherIsBetter
	}
	return scores[0], dir, len(scores), nil
}

// The bounds of [findDirs]: how deep below the source and how many
// folders in all it looks (MLE-bench's repository has about 300), and the
// folders it never enters.
const (
	searchDepth = 8
	searchSkips = "skipping hidden folders, node_modules, __pycache__, site-packages, venv and prepared data; links not followed"
)

var searchDirs = 20000 // a variable so that a test can lower it

// skipSearch reports whether findDirs leaves a folder out: version
// control, dependencies and caches, and prepared data (which may hold
// millions of files and never a task).
func skipSearch(name string) bool {
	switch name {
	case "node_modules", "__pycache__", "site-packages", "venv", "prepared":
		return true
	}
	return strings.HasPrefix(name, ".")
}

// findDirs returns source itself when match accepts it, else every folder
// below source that match accepts, at any depth down to searchDepth,
// sorted; it does not look inside a folder it accepted. Symbolic links
// are not followed (a link loop cannot trap it, a link out of the tree
// cannot widen it). A tree of more than searchDirs folders is an error
// that says to give a folder nearer the tasks.
func findDirs(source string, match func(dir string) bool) ([]string, error) {
	st, err := os.Stat(source)
	if err != nil {
		return nil, fmt.Errorf("import source: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("import source %s is not a folder", source)
	}
	if match(source) {
		return []string{source}, nil
	}
	root, err := filepath.EvalSymlinks(source)
	if err != nil {
		return nil, fmt.Errorf("import source: %w", err)
	}
	var out []string
	dirs := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if p == root {
			return err
		}
		if err != nil || !d.IsDir() {
			return nil // an unreadable folder, or a file
		}
		// rel, not p[len(root):]: a root of "." is no prefix of the paths
		// WalkDir gives below it ("a/b", not "./a/b").
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if skipSearch(d.Name()) || strings.Count(rel, string(filepath.Separator)) >= searchDepth {
			return filepath.SkipDir
		}
		if dirs++; dirs > searchDirs {
			return errTooManyDirs
		}
		if match(p) {
			out = append(out, filepath.Join(source, rel))
			return filepath.SkipDir
		}
		return nil
	})
	if errors.Is(err, errTooManyDirs) {
		return nil, fmt.Errorf("import source %s: more than %d folders below it (%s); give the folder that holds the tasks", source, searchDirs, searchSkips)
	}
	if err != nil {
		return nil, fmt.Errorf("import source: %w", err)
	}
	sort.Strings(out)
	return out, nil
}

var errTooManyDirs = errors.New("too many folders")

func firstDir(base string, rels ...string) string {
	for _, r := range rels {
		p := filepath.Join(base, r)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func containsAll(have, want []string) bool {
	set := map[string]bool{}
	for _, h := range have {
		set[h] = true
	}
	for _, w := range want {
		if !set[w] {
			return false
		}
	}
	return true
}

func directionWord(d string) string {
	if d == schemas.LowerIsBetter {
		return "lower"
	}
	return "higher"
}
