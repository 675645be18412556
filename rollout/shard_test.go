package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/shard"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

const (
	shardBucket = "mlerl-shards"
	shardPrefix = "data"
	numShards   = 3
)

// shardConfig is the config every process of the sharded test uses: two
// trajectories per shard, five steps each.
func shardConfig(root string) Config {
	cfg := DefaultConfig()
	cfg.Data, cfg.PerTask, cfg.Workers, cfg.FlushEvery, cfg.Seed = root, 2*numShards, 1, 1, 11
	cfg.Env.MaxSteps = 5
	return cfg
}

// shardChild runs as a child process: a shard (index and count from the
// Kubernetes variables) or the commit step, against the bucket that
// STORAGE_EMULATOR_HOST points at.
func shardChild() {
	cfg := shardConfig("gs://" + shardBucket + "/" + shardPrefix)
	var err error
	if os.Getenv("MLERL_SHARD_CHILD") == "commit" {
		err = Commit(context.Background(), cfg)
	} else {
		err = Run(context.Background(), cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// TestShardedRolloutOnGCS runs a 3-shard rollout as three OS processes
// (shard from JOB_COMPLETION_INDEX and MLERL_SHARDS, as in an Indexed Job)
// against fake-gcs-server. One shard is SIGKILLed after its first part
// (it reaches the bucket through a gate that holds each of its requests
// once that part is there, so the kill always lands before its second):
// the dataset stays uncommitted, the commit step refuses naming that
// shard, and rerunning the shard completes and commits it. The committed
// rows equal a single-process run's. Then the manifests are removed and
// two commit processes race to write them again.
func TestShardedRolloutOnGCS(t *testing.T) {
	if mode := os.Getenv("MLERL_SHARD_CHILD"); mode != "" {
		shardChild()
	}
	if testing.Short() {
		t.Skip("runs four rollouts in child processes")
	}
	ctx := context.Background()
	local := t.TempDir()
	setupData(t, local)

	// The fake server behind a real loopback listener, so that the child
	// processes reach it through STORAGE_EMULATOR_HOST.
	var handler http.Handler
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{NoListener: true, Scheme: "http", ExternalURL: ts.URL,
		PublicHost: strings.TrimPrefix(ts.URL, "http://"), Writer: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	handler = srv.HTTPHandler()
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: shardBucket})
	t.Setenv("STORAGE_EMULATOR_HOST", ts.URL)
	gcs, err := store.Open(ctx, "gs://"+shardBucket+"/"+shardPrefix)
	if err != nil {
		t.Fatal(err)
	}
	copyTree(t, local, srv)

	// The gate shard 1 first runs behind: a request arriving once a part of
	// shard 1 is in the bucket waits until the test releases it (after the
	// kill), so shard 1 cannot finish the run before it is killed.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseGate := func() { releaseOnce.Do(func() { close(release) }) }
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hasPart(gcs, "shard-001-of-003-part-") {
			<-release
			http.Error(w, "held by the test's gate", http.StatusServiceUnavailable)
			return
		}
		r.Host = strings.TrimPrefix(ts.URL, "http://") // the fake routes by host
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(gate.Close)
	t.Cleanup(releaseGate) // runs before gate.Close, which waits for held requests

	// child starts the test binary as a shard or commit process that reaches
	// the bucket at host (ts.URL unless it goes through the gate).
	childAt := func(host, mode string, index int) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestShardedRolloutOnGCS$")
		cmd.Env = append(os.Environ(), "MLERL_SHARD_CHILD="+mode, "STORAGE_EMULATOR_HOST="+host)
		if mode == "shard" {
			cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", shard.EnvIndex, index), fmt.Sprintf("%s=%d", shard.EnvCount, numShards))
		}
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("child %s %d output:\n%s", mode, index, out.String())
			}
		})
		return cmd
	}
	child := func(mode string, index int) *exec.Cmd { return childAt(ts.URL, mode, index) }
	// run runs a child to the end and returns its output.
	run := func(cmd *exec.Cmd) (string, error) {
		err := cmd.Run()
		return cmd.Stdout.(*syncBuffer).String(), err
	}

	// The reference: one process, no shards, on the local copy.
	if err := Run(ctx, shardConfig(local)); err != nil {
		t.Fatal(err)
	}
	want := canonical(readRows(t, local))

	// Three shard processes; shard 1 is killed once it has flushed a part.
	cmds := make([]*exec.Cmd, numShards)
	exits := make([]chan error, numShards)
	for i := range cmds {
		cmds[i] = child("shard", i)
		if i == 1 {
			cmds[i] = childAt(gate.URL, "shard", i)
		}
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
		exits[i] = make(chan error, 1)
		go func() { exits[i] <- cmds[i].Wait() }()
	}
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
	}()
	waitForPart(t, gcs, "shard-001-of-003-part-", exits)
	cmds[1].Process.Signal(syscall.SIGKILL)
	if err := <-exits[1]; err == nil {
		t.Fatal("shard 1 exited cleanly behind the gate; want it killed mid-run")
	}
	releaseGate()
	for _, i := range []int{0, 2} {
		if err := <-exits[i]; err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
	}
	if m, err := datasets.Latest(ctx, gcs, "trajectories"); err == nil {
		t.Fatalf("a shard died mid-run, yet trajectories v%d is committed", m.Version)
	}
	// The commit step refuses and names the shard to rerun.
	out, err := run(child("commit", 0))
	if err == nil || !strings.Contains(out, "shard 1/3") {
		t.Fatalf("commit with shard 1 missing: %v, output:\n%s\nwant a failure naming shard 1/3", err, out)
	}
	// Rerunning shard 1 completes the run; as the last shard it commits.
	if out, err := run(child("shard", 1)); err != nil {
		t.Fatalf("rerun of shard 1: %v\n%s", err, out)
	}
	got := canonical(readGCSRows(t, gcs))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("sharded rollout differs from a single-process one:\ngot  %d rows %v\nwant %d rows %v", len(got), head(got), len(want), head(want))
	}
	trajM, _ := datasets.Latest(ctx, gcs, "trajectories")
	stepsM, _ := datasets.Latest(ctx, gcs, "steps")
	for _, m := range []*datasets.Manifest{trajM, stepsM} {
		if err := datasets.Verify(ctx, gcs, m); err != nil {
			t.Fatalf("verify %s v%d: %v", m.Name, m.Version, err)
		}
	}

	// A shard rerun after the commit does nothing; so does a commit.
	for _, c := range []*exec.Cmd{child("shard", 2), child("commit", 0)} {
		if out, err := run(c); err != nil || !strings.Contains(out, "already committed") {
			t.Fatalf("rerun after commit: %v, output:\n%s\nwant success saying it is already committed", err, out)
		}
	}

	// Two commits racing on a complete, uncommitted run: both succeed and
	// exactly one manifest per dataset is written.
	for _, m := range []*datasets.Manifest{stepsM, trajM} {
		dir := datasets.Dir(m.Name, m.Version)
		if err := gcs.Delete(ctx, dir+"/"+datasets.ManifestFile); err != nil {
			t.Fatal(err)
		}
		pf, _ := json.Marshal(map[string]string{"schema": m.Schema, "run_key": m.RunKey, "token": "test"})
		if err := store.WriteAll(ctx, gcs, dir+"/"+datasets.PendingFile, pf, store.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]string, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = run(child("commit", i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("racing commit %d: %v\n%s", i, err, outs[i])
		}
	}
	all, committed, err := datasets.Versions(ctx, gcs, "trajectories")
	if err != nil || len(all) != 1 || !committed[trajM.Version] {
		t.Fatalf("after racing commits: versions %v committed %v, %v; want only v%d, committed", all, committed, err, trajM.Version)
	}
	if got := canonical(readGCSRows(t, gcs)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after racing commits the rows differ: got %d want %d", len(got), len(want))
	}
}

// waitForPart waits until a part file with the given prefix exists in the
// trajectories dataset; a shard failing meanwhile fails the test.
func waitForPart(t *testing.T, st store.Store, prefix string, exits []chan error) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		if hasPart(st, prefix) {
			return
		}
		for i, c := range exits {
			select {
			case err := <-c:
				if err != nil {
					t.Fatalf("shard %d failed before shard 1 wrote a part: %v", i, err)
				}
				c <- err // leave it for the caller
			default:
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("shard 1 wrote no part in 4 minutes")
}

// hasPart reports whether a part file with the given prefix exists in the
// trajectories dataset.
func hasPart(st store.Store, prefix string) bool {
	objs, _ := st.List(context.Background(), "trajectories/")
	for _, o := range objs {
		if strings.Contains(o.Key, "/"+prefix) {
			return true
		}
	}
	return false
}

// copyTree uploads a local data root into the fake bucket under shardPrefix.
func copyTree(t *testing.T, root string, srv *fakestorage.Server) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		srv.CreateObject(fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: shardBucket, Name: shardPrefix + "/" + filepath.ToSlash(rel)}, Content: b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readGCSRows(t *testing.T, st store.Store) ([]schemas.Trajectory, []schemas.Step) {
	t.Helper()
	ctx := context.Background()
	tm, err := datasets.Latest(ctx, st, "trajectories")
	if err != nil {
		t.Fatal(err)
	}
	sm, err := datasets.Latest(ctx, st, "steps")
	if err != nil {
		t.Fatal(err)
	}
	trajs, err := datasets.ReadAll[schemas.Trajectory](ctx, st, tm, schemas.Trajectories)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := datasets.ReadAll[schemas.Step](ctx, st, sm, schemas.Steps)
	if err != nil {
		t.Fatal(err)
	}
	return trajs, steps
}

// syncBuffer collects a child's output.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The shard of an Indexed Job's pod lands in the resolved config (what is
// printed and stored); a manifest whose variables disagree fails at start.
func TestConfigShardFromEnv(t *testing.T) {
	cases := []struct {
		name, flag, index, count string
		want, wantErr            string
	}{
		{name: "no env", want: ""},
		{name: "indexed job", index: "2", count: "3", want: "2/3"},
		{name: "flag wins", flag: "0/2", index: "2", count: "3", want: "0/2"},
		{name: "index beyond count", index: "3", count: "3", wantErr: "disagree"},
		{name: "count missing", index: "1", wantErr: "MLERL_SHARDS is not"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(shard.EnvIndex, c.index)
			t.Setenv(shard.EnvCount, c.count)
			cfg := DefaultConfig()
			cfg.Shard = c.flag
			cfg.Derive()
			err := cfg.Validate()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || cfg.Shard != c.want {
				t.Fatalf("got shard %q, %v want %q", cfg.Shard, err, c.want)
			}
		})
	}
}
