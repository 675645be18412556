package datasets_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// childEnv makes the test binary act as a writer that is killed mid-run.
const childEnv = "MLERL_DATASETS_KILL_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		if err := killedWriter(dir); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const partRows = 50

// stepRows returns the rows of part i: trajectory "t<i>", steps 0..partRows-1.
func stepRows(i int) []schemas.Step {
	rows := make([]schemas.Step, partRows)
	for j := range rows {
		rows[j] = schemas.Step{TaskID: "task", TrajectoryID: fmt.Sprintf("t%d", i), StepIndex: int32(j), State: strings.Repeat("s", 100)}
	}
	return rows
}

func partName(i int) string { return fmt.Sprintf("part-%05d.parquet", i) }

// killedWriter writes parts 0 and 1, leaves part 2 half written, says
// READY and waits to be killed.
func killedWriter(dir string) error {
	ctx := context.Background()
	st := store.NewLocal(dir)
	p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, "nightly-2026-11-30")
	if err != nil {
		return err
	}
	for i := range 2 {
		if err := datasets.WritePart(ctx, p, partName(i), stepRows(i)); err != nil {
			return err
		}
	}
	w, err := datasets.NewPartWriter[schemas.Step](ctx, p, partName(2))
	if err != nil {
		return err
	}
	if err := w.Write(stepRows(2)[:10]...); err != nil {
		return err
	}
	fmt.Println("READY")
	time.Sleep(time.Minute)
	return errors.New("not killed")
}

func TestKilledWriterLeavesNoDatasetAndResumes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "READY\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v; want READY", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	st := store.NewLocal(dir)
	if _, err := datasets.Latest(ctx, st, "steps"); !errors.Is(err, datasets.ErrNoDataset) {
		t.Fatalf("Latest after kill: got %v want ErrNoDataset", err)
	}
	if ms, err := datasets.List(ctx, st); err != nil || len(ms) != 0 {
		t.Fatalf("List after kill: got %d manifests, %v; want none", len(ms), err)
	}
	if _, _, err := datasets.Resolve(ctx, filepath.Join(dir, "steps", "v1")); !errors.Is(err, datasets.ErrNoDataset) || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("Resolve v1 after kill: got %v want an ErrNoDataset saying incomplete", err)
	}

	// A different run does not resume someone else's version.
	other, err := datasets.Begin(ctx, st, "steps", schemas.Steps, "other-run")
	if err != nil {
		t.Fatal(err)
	}
	if other.Version != 2 {
		t.Errorf("other run's version: got %d want 2", other.Version)
	}

	// The rerun resumes v1, keeps parts 0 and 1, writes only part 2.
	p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, "nightly-2026-11-30")
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != 1 {
		t.Fatalf("resumed version: got %d want 1", p.Version)
	}
	parts, err := p.Parts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{partName(0), partName(1)}; fmt.Sprint(parts) != fmt.Sprint(want) {
		t.Fatalf("finished parts after kill: got %v want %v (the half-written part must not count)", parts, want)
	}
	written := 0
	for i := range 3 {
		if ok, err := p.HasPart(ctx, partName(i)); err != nil {
			t.Fatal(err)
		} else if ok {
			continue
		}
		if err := datasets.WritePart(ctx, p, partName(i), stepRows(i)); err != nil {
			t.Fatal(err)
		}
		written++
	}
	if written != 1 {
		t.Errorf("parts rewritten on resume: got %d want 1", written)
	}
	if got, err := datasets.ReadPending[schemas.Step](ctx, p); err != nil || len(got) != 3*partRows {
		t.Errorf("ReadPending before the commit: got %d rows, %v; want %d", len(got), err, 3*partRows)
	}
	m, err := p.Commit(ctx, datasets.CommitOptions{Producer: datasets.NewProducer(nil)})
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Commit(ctx, datasets.CommitOptions{})
	if err != nil || again.Version != m.Version || again.CreatedAt != m.CreatedAt {
		t.Errorf("second Commit: got v%d %v, %v; want the first manifest", again.Version, again.CreatedAt, err)
	}
	rows, err := datasets.ReadAll[schemas.Step](ctx, st, m, schemas.Steps)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3*partRows || m.Rows != 3*partRows {
		t.Errorf("rows: got %d (manifest %d) want %d", len(rows), m.Rows, 3*partRows)
	}
	seen := map[string]bool{}
	for _, r := range rows {
		k := fmt.Sprintf("%s/%d", r.TrajectoryID, r.StepIndex)
		if seen[k] {
			t.Errorf("duplicated row %s", k)
		}
		seen[k] = true
	}
	latest, err := datasets.Latest(ctx, st, "steps")
	if err != nil || latest.Version != 1 {
		t.Fatalf("Latest after resume: got %v, %v want v1", latest, err)
	}
	if found, err := datasets.FindRun(ctx, st, "steps", "nightly-2026-11-30"); err != nil || found == nil || found.Version != 1 {
		t.Errorf("FindRun: got %v, %v want v1", found, err)
	}
	if found, err := datasets.FindRun(ctx, st, "steps", "never-ran"); err != nil || found != nil {
		t.Errorf("FindRun(never-ran): got %v, %v want nil", found, err)
	}
	// The committed version is immutable.
	if err := datasets.WritePart(ctx, p, partName(9), stepRows(9)); !errors.Is(err, datasets.ErrCommitted) {
		t.Errorf("writing into a committed version: got %v want ErrCommitted", err)
	}
}

// commitSteps writes one committed steps version with two parts.
func commitSteps(t *testing.T, st store.Store, runKey string) *datasets.Manifest {
	t.Helper()
	ctx := context.Background()
	p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, runKey)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := datasets.WritePart(ctx, p, partName(i), stepRows(i)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := p.Commit(ctx, datasets.CommitOptions{
		Producer: datasets.NewProducer(map[string]any{"data": "x"}),
		Parents:  []datasets.Parent{{URI: "data/tasks/v1", Name: "tasks", Version: 1}},
		Extra:    map[string]any{"note": "test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestVerify(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		damage  func(t *testing.T, dir string) // in the version folder
		wantErr []string                       // substrings; nil means clean
	}{
		{"clean", func(*testing.T, string) {}, nil},
		{"flipped byte", func(t *testing.T, dir string) { flipByte(t, filepath.Join(dir, partName(1)), 100) },
			[]string{partName(1), "checksum mismatch"}},
		{"flipped footer byte", func(t *testing.T, dir string) { flipByte(t, filepath.Join(dir, partName(0)), -5) },
			[]string{partName(0), "checksum mismatch"}},
		{"truncated", func(t *testing.T, dir string) { os.Truncate(filepath.Join(dir, partName(0)), 10) },
			[]string{partName(0), "checksum mismatch", "10 bytes"}},
		{"missing part", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, partName(1))) },
			[]string{partName(1), "missing"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			st := store.NewLocal(root)
			m := commitSteps(t, st, "r")
			dir := filepath.Join(root, "steps", "v1")
			manifest, _ := os.ReadFile(filepath.Join(dir, datasets.ManifestFile))
			c.damage(t, dir)
			err := datasets.Verify(ctx, st, m)
			if c.wantErr == nil {
				if err != nil {
					t.Fatalf("got %v want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, datasets.ErrCorrupt) {
				t.Fatalf("got %v want an ErrCorrupt", err)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if after, _ := os.ReadFile(filepath.Join(dir, datasets.ManifestFile)); string(after) != string(manifest) {
				t.Errorf("Verify changed the manifest")
			}
		})
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(b))
	}
	b[off] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCommitRefusesBadParts(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		write   func(t *testing.T, p *datasets.Pending)
		wantErr []string
		is      error
	}{
		{"corrupt parquet", func(t *testing.T, p *datasets.Pending) {
			if err := store.WriteAll(ctx, p.St, p.Dir()+"/"+partName(0), []byte("PAR1 this is not parquet PAR1"), store.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []string{partName(0), "not a readable Parquet file"}, datasets.ErrCorrupt},
		{"unknown major version", func(t *testing.T, p *datasets.Pending) {
			v2 := *p
			v2.Schema.Version = "2.0"
			if err := datasets.WritePart(ctx, &v2, partName(0), stepRows(0)); err != nil {
				t.Fatal(err)
			}
		}, []string{partName(0), "version 2.0 is not readable"}, schemas.ErrVersion},
		{"other schema", func(t *testing.T, p *datasets.Pending) {
			other := *p
			other.Schema = schemas.Tasks
			if err := datasets.WritePart(ctx, &other, partName(0), []schemas.Task{{TaskID: "x"}}); err != nil {
				t.Fatal(err)
			}
		}, []string{partName(0), `schema "tasks" found, "steps" expected`}, schemas.ErrVersion},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			st := store.NewLocal(root)
			good := commitSteps(t, st, "good")
			before, _ := os.ReadFile(filepath.Join(root, "steps", "v1", datasets.ManifestFile))
			p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, "bad")
			if err != nil {
				t.Fatal(err)
			}
			c.write(t, p)
			_, err = p.Commit(ctx, datasets.CommitOptions{})
			if err == nil || !errors.Is(err, c.is) {
				t.Fatalf("Commit: got %v want %v", err, c.is)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "steps", "v2", datasets.ManifestFile)); !os.IsNotExist(err) {
				t.Errorf("a manifest was written for the bad version")
			}
			latest, err := datasets.Latest(ctx, st, "steps")
			if err != nil || latest.Version != good.Version {
				t.Errorf("Latest: got %v, %v want v%d", latest, err, good.Version)
			}
			if after, _ := os.ReadFile(filepath.Join(root, "steps", "v1", datasets.ManifestFile)); string(after) != string(before) {
				t.Errorf("the committed version's manifest changed")
			}
			if err := datasets.Verify(ctx, st, good); err != nil {
				t.Errorf("the committed version no longer verifies: %v", err)
			}
		})
	}
}

func TestSchemaVersionsOnRead(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		version string
		wantErr string // "" means readable
	}{
		{"same", "1.0", ""},
		{"minor bump", "1.4", ""},
		{"major bump", "2.0", "version 2.0 is not readable by this mlerl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			st := store.NewLocal(root)
			written := schemas.Steps
			written.Version = c.version
			p, err := datasets.Begin(ctx, st, "steps", written, "r")
			if err != nil {
				t.Fatal(err)
			}
			if err := datasets.WritePart(ctx, p, partName(0), stepRows(0)); err != nil {
				t.Fatal(err)
			}
			m, err := p.Commit(ctx, datasets.CommitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The reader knows schemas.Steps (1.0): check both the
			// manifest-level and the file-level checks, with both readers.
			file := *m
			file.SchemaVersion = schemas.Steps.Version // a manifest that lies: the file must still be checked
			for _, mm := range []*datasets.Manifest{m, &file} {
				rows, err := datasets.ReadAll[schemas.Step](ctx, st, mm, schemas.Steps)
				arrowErr := datasets.EachRecord(ctx, st, mm, schemas.Steps, nil, func(arrow.Record) error { return nil })
				for _, got := range []error{err, arrowErr} {
					if c.wantErr == "" {
						if got != nil {
							t.Fatalf("got %v want nil", got)
						}
						continue
					}
					if got == nil || !errors.Is(got, schemas.ErrVersion) || !strings.Contains(got.Error(), c.wantErr) {
						t.Fatalf("got %v want ErrVersion saying %q", got, c.wantErr)
					}
					// Name the file (or the manifest) that was refused.
					if !strings.Contains(got.Error(), filepath.Join(root, "steps", "v1")) {
						t.Errorf("error %q does not name the file", got)
					}
				}
				if c.wantErr == "" && len(rows) != partRows {
					t.Errorf("rows: got %d want %d", len(rows), partRows)
				}
			}
		})
	}
}

func TestSplitURI(t *testing.T) {
	cases := []struct {
		uri        string
		root, name string
		version    int
		wantErr    bool
	}{
		{"data/steps/v3", "data", "steps", 3, false},
		{"data/steps", "data", "steps", 0, false},
		{"data/steps/", "data", "steps", 0, false},
		{"steps", ".", "steps", 0, false},
		{"/abs/data/ideas/v12", "/abs/data", "ideas", 12, false},
		{"gs://bucket/prefix/steps/v1", "gs://bucket/prefix", "steps", 1, false},
		{"gs://bucket/steps", "gs://bucket", "steps", 0, false},
		{"file:///tmp/d/tasks", "file:///tmp/d", "tasks", 0, false},
		{"gs://bucket", "", "", 0, true},
	}
	for _, c := range cases {
		t.Run(c.uri, func(t *testing.T) {
			root, name, version, err := datasets.SplitURI(c.uri)
			if (err != nil) != c.wantErr {
				t.Fatalf("err: got %v want error %v", err, c.wantErr)
			}
			if err == nil && (root != c.root || name != c.name || version != c.version) {
				t.Errorf("got (%q, %q, %d) want (%q, %q, %d)", root, name, version, c.root, c.name, c.version)
			}
		})
	}
}

func TestManifestContents(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st := store.NewLocal(root)
	m := commitSteps(t, st, "run-a")
	got, err := datasets.ReadManifest(ctx, st, "steps", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Schema != "steps" || got.SchemaVersion != schemas.Steps.Version || got.Rows != 2*partRows || len(got.Files) != 2 || got.RunKey != "run-a" {
		t.Errorf("manifest: got %+v", got)
	}
	for _, f := range got.Files {
		if len(f.SHA256) != 64 || f.Rows != partRows || f.Bytes <= 0 {
			t.Errorf("file entry: got %+v", f)
		}
	}
	if got.Producer.Command == "" || got.Producer.Host == "" {
		t.Errorf("producer: got %+v", got.Producer)
	}
	if cfg, ok := got.Producer.Config.(map[string]any); !ok || cfg["data"] != "x" {
		t.Errorf("producer config: got %#v", got.Producer.Config)
	}
	if len(got.Parents) != 1 || got.Parents[0].Name != "tasks" {
		t.Errorf("parents: got %+v", got.Parents)
	}
	if got.Ref().URI != filepath.Join(root, "steps", "v1") || m.URI != got.URI {
		t.Errorf("ref: got %q (commit said %q)", got.Ref().URI, m.URI)
	}
	// ResolveIn by name and by name/vN.
	for _, ref := range []string{"steps", "steps/v1"} {
		r, err := datasets.ResolveIn(ctx, st, ref)
		if err != nil || r.Version != 1 {
			t.Errorf("ResolveIn(%q): got %v, %v", ref, r, err)
		}
	}
	// A second committed version becomes the latest; List shows both.
	commitSteps(t, st, "run-b")
	ms, err := datasets.List(ctx, st)
	if err != nil || len(ms) != 2 || ms[1].Version != 2 {
		t.Fatalf("List: got %d, %v", len(ms), err)
	}
	// Nested names are listed; the blob store is not walked.
	pn, _ := datasets.Begin(ctx, st, "exports/sft", schemas.SFTExamples, "x")
	datasets.WritePart(ctx, pn, "part-0.parquet", []schemas.SFTExample{{ExampleID: "e"}})
	if _, err := pn.Commit(ctx, datasets.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	store.WriteAll(ctx, st, "_blobs/sha256/v1/_MANIFEST.json", []byte("not a manifest"), store.CreateOptions{})
	ms, err = datasets.List(ctx, st)
	if err != nil || len(ms) != 3 || ms[0].Name != "exports/sft" {
		t.Fatalf("List with a nested dataset: got %d, %v", len(ms), err)
	}
	if _, m2, err := datasets.Resolve(ctx, filepath.Join(root, "exports", "sft")); err != nil || m2.Rows != 1 {
		t.Errorf("Resolve of a nested dataset: got %v, %v", m2, err)
	}
	latest, err := datasets.Latest(ctx, st, "steps")
	if err != nil || latest.Version != 2 {
		t.Errorf("Latest: got %v, %v want v2", latest, err)
	}
	if _, err := datasets.Latest(ctx, st, "ideas"); !errors.Is(err, datasets.ErrNoDataset) {
		t.Errorf("Latest(ideas): got %v want ErrNoDataset", err)
	}
	// A damaged manifest is refused with its URI.
	mpath := filepath.Join(root, "steps", "v2", datasets.ManifestFile)
	os.WriteFile(mpath, []byte("{not json"), 0o644)
	if _, err := datasets.ReadManifest(ctx, st, "steps", 2); err == nil || !errors.Is(err, datasets.ErrCorrupt) || !strings.Contains(err.Error(), mpath) {
		t.Errorf("damaged manifest: got %v want ErrCorrupt naming %s", err, mpath)
	}
}

func TestProducer(t *testing.T) {
	type llm struct {
		BaseURL string `yaml:"base_url"`
		APIKey  string `yaml:"api_key"`
	}
	type cfg struct {
		Data    string        `yaml:"data"`
		Timeout time.Duration `yaml:"timeout"`
		LLM     llm           `yaml:"llm"`
	}
	p := datasets.NewProducer(cfg{Data: "gs://b/p", Timeout: 90 * time.Second, LLM: llm{BaseURL: "http://x", APIKey: "sk-secret"}})
	c, ok := p.Config.(map[string]any)
	if !ok {
		t.Fatalf("config: got %T", p.Config)
	}
	l, _ := c["llm"].(map[string]any)
	if c["data"] != "gs://b/p" || c["timeout"] != "1m30s" || l["base_url"] != "http://x" || l["api_key"] != "<redacted>" {
		t.Errorf("config: got %#v", c)
	}
	if !strings.Contains(p.Command, filepath.Base(os.Args[0])) {
		t.Errorf("command: got %q", p.Command)
	}
	// Tests run inside the checkout (when it is a git checkout): the git
	// fallback finds the revision.
	want := ""
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		want = strings.TrimSpace(string(out))
	}
	if rev := datasets.Revision(); strings.TrimSuffix(rev, "-dirty") != want {
		t.Errorf("Revision: got %q want %q (+ -dirty)", rev, want)
	}
}

// stepV11 is a steps row as a later minor version (1.1) might write it:
// one more optional column.
type stepV11 struct {
	schemas.Step
	Confidence *float64 `parquet:"confidence,optional"`
}

// stepOld is a steps row as an earlier writer might have had it, without
// the last columns (snapshot_after, done).
type stepOld struct {
	TaskID       string `parquet:"task_id"`
	TrajectoryID string `parquet:"trajectory_id"`
	StepIndex    int32  `parquet:"step_index"`
	State        string `parquet:"state"`
}

// TestMinorVersionColumns reads files with an extra column (newer minor)
// and with missing columns (older minor) as today's Step.
func TestMinorVersionColumns(t *testing.T) {
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	newer := schemas.Steps
	newer.Version = "1.1"
	p, err := datasets.Begin(ctx, st, "steps", newer, "newer")
	if err != nil {
		t.Fatal(err)
	}
	c := 0.9
	if err := datasets.WritePart(ctx, p, "part-0.parquet", []stepV11{{Step: schemas.Step{TaskID: "a", StepIndex: 3, Done: true}, Confidence: &c}}); err != nil {
		t.Fatal(err)
	}
	m, err := p.Commit(ctx, datasets.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := datasets.ReadAll[schemas.Step](ctx, st, m, schemas.Steps)
	if err != nil || len(rows) != 1 || rows[0].TaskID != "a" || rows[0].StepIndex != 3 || !rows[0].Done {
		t.Errorf("1.1 file read as 1.0: got %+v, %v", rows, err)
	}

	p, err = datasets.Begin(ctx, st, "steps", schemas.Steps, "older")
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.WritePart(ctx, p, "part-0.parquet", []stepOld{{TaskID: "b", StepIndex: 4, State: "s"}}); err != nil {
		t.Fatal(err)
	}
	m, err = p.Commit(ctx, datasets.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rows, err = datasets.ReadAll[schemas.Step](ctx, st, m, schemas.Steps)
	if err != nil || len(rows) != 1 || rows[0].TaskID != "b" || rows[0].State != "s" || rows[0].Done || rows[0].SnapshotAfter != "" {
		t.Errorf("file without the newer columns: got %+v, %v", rows, err)
	}
}
