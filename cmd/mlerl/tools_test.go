package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// mainEnv makes the test binary run main() itself, so tests can check the
// real exit status without building the binary.
const mainEnv = "MLERL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Args = append([]string{"mlerl"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// run executes the command tree in process and returns its stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// runMain runs the real main in a child process.
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.String(), e.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

// fixture writes steps v1 (2 parts x 3 rows), ideas v1, and an
// uncommitted steps v2 into a fresh root.
func fixture(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	root := t.TempDir()
	st := store.NewLocal(root)
	p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, "k")
	if err != nil {
		t.Fatal(err)
	}
	before := 0.5
	for i := range 2 {
		var rows []schemas.Step
		for j := range 3 {
			rows = append(rows, schemas.Step{TaskID: "task-a", TrajectoryID: fmt.Sprintf("traj-%d", i), StepIndex: int32(j),
				State: "state", MetricBefore: &before, Markers: []string{"m"}, RewardTerms: []schemas.RewardTerm{{Name: "delta", Value: 0.25}}})
		}
		if err := datasets.WritePart(ctx, p, fmt.Sprintf("part-%d.parquet", i), rows); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Commit(ctx, datasets.CommitOptions{Producer: datasets.NewProducer(map[string]string{"data": root}),
		Parents: []datasets.Parent{{URI: root + "/tasks/v1", Name: "tasks", Version: 1}}}); err != nil {
		t.Fatal(err)
	}
	pi, _ := datasets.Begin(ctx, st, "ideas", schemas.Ideas, "k")
	if err := datasets.WritePart(ctx, pi, "part-0.parquet", []schemas.Idea{{IdeaID: "i1", Embedding: []float32{1, 0.5}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pi.Commit(ctx, datasets.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	p2, _ := datasets.Begin(ctx, st, "steps", schemas.Steps, "unfinished")
	if err := datasets.WritePart(ctx, p2, "part-0.parquet", []schemas.Step{{TaskID: "x"}}); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestLs(t *testing.T) {
	root := fixture(t)
	out, err := run(t, "ls", root)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "DATASET") || !strings.HasPrefix(lines[1], "ideas") || !strings.HasPrefix(lines[2], "steps") {
		t.Fatalf("ls: got\n%s\nwant a header, ideas v1 and steps v1 (not the uncommitted v2)", out)
	}
	if f := strings.Fields(lines[2]); f[1] != "v1" || f[2] != "steps/1.0" || f[3] != "6" {
		t.Errorf("steps line: got %q", lines[2])
	}
	out, err = run(t, "ls", "--json", root)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("ls --json line %q: %v", l, err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 2 || rows[1]["name"] != "steps" || rows[1]["rows"] != 6.0 || rows[1]["uri"] != filepath.Join(root, "steps", "v1") {
		t.Errorf("ls --json: got %v", rows)
	}
	// An empty root lists nothing; a missing root, or a file, is an error.
	empty := t.TempDir()
	if out, err := run(t, "ls", "--json", empty); err != nil || out != "" {
		t.Errorf("ls of an empty root: got %q, %v", out, err)
	}
	for _, c := range []struct{ root, want string }{
		{filepath.Join(root, "nothing-here"), root + "/nothing-here: no such folder"},
		{filepath.Join(root, "steps", "v1", "part-0.parquet"), root + "/steps/v1/part-0.parquet is a file, not a data root (a folder of datasets)"},
	} {
		if out, err := run(t, "ls", c.root); err == nil || err.Error() != c.want {
			t.Errorf("ls %s: got %q, %v want the error %q", c.root, out, err, c.want)
		}
	}
}

// TestNotADataset checks that inspect and head on a path that is not a
// dataset say what it is, and that head reads a single Parquet file, with
// or without mlerl's schema metadata (an export).
func TestNotADataset(t *testing.T) {
	root := fixture(t)
	os.MkdirAll(filepath.Join(root, "tasks", "wine"), 0o755)
	os.WriteFile(filepath.Join(root, "tasks", "wine", "task.yaml"), []byte("id: wine\n"), 0o644)
	type exportRow struct {
		Prompt string  `parquet:"prompt"`
		Reward float64 `parquet:"reward"`
	}
	export := filepath.Join(root, "exports", "rl_states", "v1", "train.parquet")
	os.MkdirAll(filepath.Dir(export), 0o755)
	if err := parquet.WriteFile(export, []exportRow{{"p0", 0.5}, {"p1", -1}, {"p2", 1}}); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(root, "steps", "v1", "part-1.parquet")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"inspect", filepath.Join(root, "tasks")}, root + "/tasks is not a dataset: no committed dataset: it holds no v<N> version folders (`mlerl ls <data root>` lists the datasets)"},
		{[]string{"head", filepath.Join(root, "tasks", "wine")}, root + "/tasks/wine is not a dataset: no committed dataset: it holds no v<N> version folders (`mlerl ls <data root>` lists the datasets)"},
		{[]string{"inspect", root}, root + " is not a dataset: no committed dataset: it holds no v<N> version folders (`mlerl ls <data root>` lists the datasets)"},
		{[]string{"head", filepath.Join(root, "tasks", "wine", "task.yaml")}, root + "/tasks/wine/task.yaml is a file, not a dataset (a folder of v<N> version folders): no committed dataset"},
		{[]string{"inspect", export}, export + " is a file, not a dataset (a folder of v<N> version folders): no committed dataset; `mlerl head " + export + "` prints its rows"},
		{[]string{"head", filepath.Join(root, "nope.parquet")}, root + "/nope.parquet: not found"},
		{[]string{"head", filepath.Join(root, "tasks", "wine", "task.parquet")}, root + "/tasks/wine/task.parquet: not found"},
	}
	for _, c := range cases {
		if out, err := run(t, c.args...); err == nil || err.Error() != c.want {
			t.Errorf("%v: got %q, %v\nwant the error %s", c.args, out, err, c.want)
		}
	}
	out, err := run(t, "head", "--json", "-n", "2", export)
	if want := `{"prompt":"p0","reward":0.5}` + "\n" + `{"prompt":"p1","reward":-1}` + "\n"; err != nil || out != want {
		t.Errorf("head of an export: got %q, %v want %q", out, err, want)
	}
	out, err = run(t, "head", "-n", "1", export)
	if want := "{\n  \"prompt\": \"p0\",\n  \"reward\": 0.5\n}\n"; err != nil || out != want {
		t.Errorf("head of an export, indented: got %q, %v want %q", out, err, want)
	}
	out, err = run(t, "head", "--json", "-n", "1", part)
	if err != nil || !strings.HasPrefix(out, `{"task_id":"task-a","trajectory_id":"traj-1","step_index":0,`) {
		t.Errorf("head of a part file: got %q, %v", out, err)
	}
}

func TestInspect(t *testing.T) {
	root := fixture(t)
	out, err := run(t, "inspect", "--json", filepath.Join(root, "steps"))
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := os.ReadFile(filepath.Join(root, "steps", "v1", datasets.ManifestFile))
	if strings.TrimSpace(out) != strings.TrimSpace(string(stored)) {
		t.Errorf("inspect --json is not the manifest itself:\ngot  %s\nwant %s", out, stored)
	}
	var m datasets.Manifest
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.Rows != 6 || len(m.Files) != 2 {
		t.Errorf("manifest: got %+v, %v", m, err)
	}
	out, err = run(t, "inspect", filepath.Join(root, "steps", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"dataset   steps v1", "rows      6 in 2 files", "parent    " + root + "/tasks/v1", "file      part-1.parquet  3 rows", "run key   k"} {
		if !strings.Contains(out, w) {
			t.Errorf("inspect output lacks %q:\n%s", w, out)
		}
	}
	// The uncommitted version is invisible, with a clear message.
	_, err = run(t, "inspect", filepath.Join(root, "steps", "v2"))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "steps", "v2")) || !strings.Contains(err.Error(), "has no _MANIFEST.json") || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("inspect of an uncommitted version: got %v", err)
	}
	_, err = run(t, "inspect", filepath.Join(root, "trajectories"))
	if err == nil || !strings.Contains(err.Error(), "no committed dataset") || !strings.Contains(err.Error(), "trajectories") {
		t.Errorf("inspect of a missing dataset: got %v", err)
	}
}

func TestHead(t *testing.T) {
	root := fixture(t)
	out, err := run(t, "head", "--json", "-n", "4", filepath.Join(root, "steps"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("head -n 4: got %d lines:\n%s", len(lines), out)
	}
	for i, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		wantTraj := fmt.Sprintf("traj-%d", i/3)
		if r["trajectory_id"] != wantTraj || r["step_index"] != float64(i%3) || r["metric_before"] != 0.5 || r["metric_after"] != nil {
			t.Errorf("line %d: got %v", i, r)
		}
		if terms, _ := r["reward_terms"].([]any); len(terms) != 1 || terms[0].(map[string]any)["name"] != "delta" {
			t.Errorf("line %d reward_terms: got %v", i, r["reward_terms"])
		}
	}
	if !strings.HasPrefix(lines[0], `{"task_id":"task-a","trajectory_id":"traj-0","step_index":0,`) {
		t.Errorf("columns not in schema order: %s", lines[0])
	}
	out, err = run(t, "head", "-n", "1", filepath.Join(root, "ideas"))
	if err != nil || !strings.Contains(out, `"embedding": [`) || !strings.Contains(out, `"idea_id": "i1"`) {
		t.Errorf("head ideas: got %s, %v", out, err)
	}
	if out, err := run(t, "head", "--json", "-n", "100", filepath.Join(root, "steps")); err != nil || strings.Count(out, "\n") != 6 {
		t.Errorf("head -n 100 of 6 rows: got %d lines, %v", strings.Count(out, "\n"), err)
	}
	if _, err := run(t, "head", "-n", "-2", filepath.Join(root, "steps")); err == nil || !strings.Contains(err.Error(), "-n -2") {
		t.Errorf("head -n -2: got %v want an error", err)
	}
}

func TestVerifyCommand(t *testing.T) {
	root := fixture(t)
	out, _, code := runMain(t, "verify", filepath.Join(root, "steps"))
	if code != 0 || !strings.Contains(out, "ok  steps v1: 2 files, 6 rows") {
		t.Fatalf("verify of a good dataset: exit %d, %q", code, out)
	}
	part := filepath.Join(root, "steps", "v1", "part-1.parquet")
	b, _ := os.ReadFile(part)
	b[len(b)/2] ^= 0x01
	os.WriteFile(part, b, 0o644)
	manifest, _ := os.ReadFile(filepath.Join(root, "steps", "v1", datasets.ManifestFile))
	_, stderr, code := runMain(t, "verify", filepath.Join(root, "steps", "v1"))
	if code == 0 || !strings.Contains(stderr, part) || !strings.Contains(stderr, "checksum mismatch") {
		t.Errorf("verify after a flipped byte: exit %d, stderr %q; want non-zero naming %s", code, stderr, part)
	}
	if after, _ := os.ReadFile(filepath.Join(root, "steps", "v1", datasets.ManifestFile)); !bytes.Equal(after, manifest) {
		t.Errorf("verify changed the manifest")
	}
	// The other dataset is untouched and still verifies.
	if _, err := run(t, "verify", filepath.Join(root, "ideas")); err != nil {
		t.Errorf("verify ideas: %v", err)
	}
}

type stageTestConfig struct {
	Data  string        `yaml:"data" help:"data root"`
	Steps int           `yaml:"steps" help:"how many steps"`
	Wait  time.Duration `yaml:"wait" help:"pause"`
}

func TestStageCommand(t *testing.T) {
	defaults := func() stageTestConfig { return stageTestConfig{Data: "./data", Steps: 3, Wait: time.Second} }
	var got stageTestConfig
	newCmd := func() (*bytes.Buffer, *bytes.Buffer, func(args ...string) error) {
		cmd := stageCommand("demo", "a test stage", defaults, func(ctx context.Context, cfg stageTestConfig) error {
			got = cfg
			return nil
		})
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		return &out, &errOut, func(args ...string) error { cmd.SetArgs(args); return cmd.Execute() }
	}
	cfgFile := filepath.Join(t.TempDir(), "demo.yaml")
	os.WriteFile(cfgFile, []byte("steps: 8\nwait: 2m\n"), 0o644)

	out, _, exec := newCmd()
	if err := exec("--config", cfgFile, "--wait=5s", "--print-config"); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"data: ./data # data root", "steps: 8 # how many steps", "wait: 5s # pause"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("--print-config lacks %q:\n%s", w, out)
		}
	}
	if got != (stageTestConfig{}) {
		t.Errorf("--print-config ran the stage")
	}

	_, errOut, exec := newCmd()
	if err := exec("--config", cfgFile, "--data=gs://b/p"); err != nil {
		t.Fatal(err)
	}
	if want := (stageTestConfig{Data: "gs://b/p", Steps: 8, Wait: 2 * time.Minute}); got != want {
		t.Errorf("resolved config: got %+v want %+v", got, want)
	}
	if !strings.Contains(errOut.String(), "# demo: resolved config") || !strings.Contains(errOut.String(), "#   data: gs://b/p") {
		t.Errorf("resolved config not printed to stderr:\n%s", errOut)
	}

	os.WriteFile(cfgFile, []byte("steps: 8\nstepz: 9\n"), 0o644)
	_, _, exec = newCmd()
	if err := exec("--config", cfgFile); err == nil || !strings.Contains(err.Error(), `unknown key "stepz"`) || !strings.Contains(err.Error(), cfgFile) {
		t.Errorf("unknown key: got %v", err)
	}
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	// Inside a git checkout the fallback knows the revision.
	want := "mlerl unknown"
	if rev, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		want = "mlerl " + strings.TrimSpace(string(rev))
	}
	if !strings.HasPrefix(out, want) {
		t.Errorf("version: got %q want %q", out, want)
	}
}

// TestHeadKnowsEverySchema: `mlerl head` can print every dataset mlerl writes.
func TestHeadKnowsEverySchema(t *testing.T) {
	for _, info := range schemas.All() {
		if headers[info.Name] == nil {
			t.Errorf("mlerl head cannot print %s rows: add the schema to headers", info.Name)
		}
	}
}

// TestRowJSONNaN: `head --json` prints a value that was not measured (NaN,
// infinity) as null instead of failing the whole listing.
func TestRowJSONNaN(t *testing.T) {
	nan := math.NaN()
	row := struct {
		A float64   `parquet:"a"`
		B []float64 `parquet:"b"`
		C *float64  `parquet:"c,optional"`
		D *float64  `parquet:"d,optional"`
		E float64   `parquet:"e"`
	}{A: nan, B: []float64{1, math.Inf(1)}, C: &nan, E: 0.5}
	b, err := rowJSON(reflect.ValueOf(row))
	if err != nil || string(b) != `{"a":null,"b":[1,null],"c":null,"d":null,"e":0.5}` {
		t.Errorf("rowJSON = %s, %v", b, err)
	}
}
