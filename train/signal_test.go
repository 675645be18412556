package train

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// runChild runs this test binary's test named test with env set, sends it
// SIGTERM once the file ready exists, and returns its stderr, its exit
// error and how long it took to stop.
func runChild(t *testing.T, test, env, ready string) (string, error, time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env)
	var stderr bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the child never got going:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	return stderr.String(), err, time.Since(start)
}

// childMain runs fn under a context that SIGTERM cancels, as the mlerl
// command does, and exits like it: 1 with one line on failure.
func childMain(fn func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := fn(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "mlerl:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestSFTStopsOnSIGTERM: `train sft` stopped by SIGTERM (a Kubernetes
// grace period) saves its position, exits non-zero within 30 s with one
// line saying how to resume, and the resumed run ends with the weights of
// an uninterrupted one.
func TestSFTStopsOnSIGTERM(t *testing.T) {
	if root := os.Getenv("MLERL_SFT_TERM_ROOT"); root != "" {
		afterSFTStep = func(step int) {
			if step == 3 {
				os.WriteFile(filepath.Join(root, "ready"), nil, 0o644)
			}
			time.Sleep(50 * time.Millisecond)
		}
		childMain(func(ctx context.Context) error { return runSFT(ctx, tinySFTConfig(root), io.Discard) })
	}
	full, stopped := t.TempDir(), t.TempDir()
	writeSFTExamples(t, full, 24)
	writeSFTExamples(t, stopped, 24)
	if err := runSFT(context.Background(), tinySFTConfig(full), io.Discard); err != nil {
		t.Fatal(err)
	}
	out, err, took := runChild(t, "TestSFTStopsOnSIGTERM", "MLERL_SFT_TERM_ROOT="+stopped, filepath.Join(stopped, "ready"))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("child: got %v, want exit status 1; output:\n%s", err, out)
	}
	t.Logf("stopped %v after SIGTERM: %s", took.Round(time.Millisecond), lastLine(out))
	if took > 30*time.Second {
		t.Errorf("took %v to stop, want under 30 s", took)
	}
	if l := lastLine(out); !strings.Contains(l, "train sft: interrupted") || !strings.Contains(l, "rerun the same command to resume") {
		t.Errorf("last line %q: want one line saying it was interrupted and how to resume", l)
	}
	if err := runSFT(context.Background(), tinySFTConfig(stopped), io.Discard); err != nil {
		t.Fatal(err)
	}
	wa, sa := readWeights(t, full, "checkpoints/sft")
	wb, sb := readWeights(t, stopped, "checkpoints/sft")
	if sa != sb || len(wa) != len(wb) {
		t.Fatalf("got %s with %d tensors after the stop, want %s with %d", sb, len(wb), sa, len(wa))
	}
	for path, a := range wa {
		if !bytes.Equal(a, wb[path]) {
			t.Errorf("tensor %s after stop and resume differs from an uninterrupted run", path)
		}
	}
}

// TestPPOStopsOnSIGTERM: `train ppo` stopped mid-update saves the last
// completed update (weights, optimiser, sampler), exits non-zero within
// 30 s with one line, and a rerun continues from there.
func TestPPOStopsOnSIGTERM(t *testing.T) {
	if root := os.Getenv("MLERL_PPO_TERM_ROOT"); root != "" {
		cfg := tinyPPOConfig(root)
		cfg.Updates, cfg.CheckpointEvery = 1000, 1000
		calls := 0
		slow := func(ctx context.Context, s schemas.RLState, a string) (Outcome, error) {
			if calls++; calls == 3*cfg.BatchSize {
				os.WriteFile(filepath.Join(root, "ready"), nil, 0o644)
			}
			time.Sleep(5 * time.Millisecond)
			return pickD(ctx, s, a)
		}
		childMain(func(ctx context.Context) error { return RunPPOWith(ctx, cfg, slow, io.Discard) })
	}
	root := t.TempDir()
	setupPPO(t, root)
	out, err, took := runChild(t, "TestPPOStopsOnSIGTERM", "MLERL_PPO_TERM_ROOT="+root, filepath.Join(root, "ready"))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("child: got %v, want exit status 1; output:\n%s", err, out)
	}
	t.Logf("stopped %v after SIGTERM: %s", took.Round(time.Millisecond), lastLine(out))
	if took > 30*time.Second {
		t.Errorf("took %v to stop, want under 30 s", took)
	}
	if l := lastLine(out); !strings.Contains(l, "train ppo: interrupted") || !strings.Contains(l, "rerun the same command to resume") {
		t.Errorf("last line %q: want one line saying it was interrupted and how to resume", l)
	}
	ctx := context.Background()
	st, _ := store.Open(ctx, root)
	latest, _ := policy.LatestCheckpoint(ctx, st, "checkpoints/ppo")
	var saved ppoState
	if _, err := policy.LoadCheckpoint(ctx, st, latest, nil, &saved); err != nil {
		t.Fatal(err)
	}
	if saved.Update < 1 || len(readMetrics(t, root, "checkpoints/ppo")) != saved.Update {
		t.Fatalf("saved update %d with %d metric lines: want the completed updates", saved.Update, len(readMetrics(t, root, "checkpoints/ppo")))
	}
	cfg := tinyPPOConfig(root)
	cfg.Updates = saved.Update + 2
	if err := RunPPOWith(ctx, cfg, pickD, io.Discard); err != nil {
		t.Fatal(err)
	}
	if n := len(readMetrics(t, root, "checkpoints/ppo")); n != saved.Update+2 {
		t.Errorf("after resuming: %d metric lines, want %d", n, saved.Update+2)
	}
}
