package env

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestSweepStaleWorkspaces: a process's first workspace under a folder
// removes the workspaces there of this host's processes that are gone
// (a killed run's), and nothing else: not a running process's, not
// another host's, not its own, not a name in another form, not a file.
func TestSweepStaleWorkspaces(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid // exited and reaped
	if running(dead) {
		t.Skipf("pid %d was reused at once", dead)
	}
	live := os.Getppid()
	mk := func(name string, file bool) string {
		p := filepath.Join(dir, name)
		if file {
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "sub", "train.py"), []byte("print(1)"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	name := func(pid int, host, task string) string {
		return "mlerl-ws-" + strconv.Itoa(pid) + "-" + host + "-" + task + "-123456"
	}
	stale := mk(name(dead, hostTag, "wine-cultivar"), false)
	keep := []string{
		mk(name(live, hostTag, "titanic-survival"), false),   // a running process's
		mk(name(dead, "0badc0de", "wine-cultivar"), false),   // another host's
		mk(name(os.Getpid(), hostTag, "sonar-mines"), false), // this process's
		mk("mlerl-ws-wine-cultivar-987654", false),           // the old form
		mk(name(dead, hostTag, "a-file"), true),              // not a folder
	}
	if hostTag == "0badc0de" {
		t.Skip("this host's tag is the test's other host")
	}
	if n := sweepStale(dir); n != 1 {
		t.Errorf("sweepStale removed %d folders, want 1", n)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("%s: the gone process's workspace is still there (%v)", filepath.Base(stale), err)
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(p), err)
		}
	}
	// Once per folder and process: a second stale folder stays until the
	// next process.
	again := mk(name(dead, hostTag, "dna-splice"), false)
	if n := sweepStale(dir); n != 0 {
		t.Errorf("second sweep removed %d", n)
	}
	if _, err := os.Stat(again); err != nil {
		t.Error(err)
	}
	// A workspace's name is in the form the sweep reads.
	pid, host, ok := workspaceOwner(workspacePattern("wine-cultivar") + "42")
	if !ok || pid != os.Getpid() || host != hostTag {
		t.Errorf("workspacePattern's name parses as pid %d host %q (%v)", pid, host, ok)
	}
}
