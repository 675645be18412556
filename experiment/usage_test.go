package experiment

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStageLegs runs a stage as three legs of one grid version, the second
// killed before it could finish its ledger, then once in a new version:
// the usage a stage reports is every leg's of its version, the log keeps
// every leg's output, and a new version starts both afresh.
func TestStageLegs(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("reads a running leg's CPU time from /proc")
	}
	defer func(d time.Duration) { ledgerEvery = d }(ledgerEvery)
	ledgerEvery = 50 * time.Millisecond
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{Bin: "/bin/sh"}
	// A leg that burns a fixed amount of CPU (about 0.3 s; its wall time
	// depends on the machine's load), then says which leg it is.
	burn := func(leg string) []string {
		return []string{"-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo leg ` + leg}
	}
	ledgerPath := filepath.Join(dir, "sft-s1-train-sft.usage.json")

	u1, err := stage(ctx, cfg, dir, "v1", "sft-s1-train-sft", burn("one")...)
	if err != nil {
		t.Fatal(err)
	}
	if u1.cpuS < 0.05 || u1.wallS < u1.cpuS*0.9 {
		t.Fatalf("first leg: %+v, want its CPU time and at least as much wall time", u1)
	}

	// The second leg is killed: only its running record reaches the
	// ledger, as a SIGKILL of the experiment would leave it.
	led, _, _, err := readLedger(ledgerPath, "v1")
	if err != nil {
		t.Fatal(err)
	}
	led.Running = &legUsage{Started: time.Now(), WallS: 5, CPUS: 4}
	if err := led.write(ledgerPath); err != nil {
		t.Fatal(err)
	}

	u3, err := stage(ctx, cfg, dir, "v1", "sft-s1-train-sft", burn("three")...)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := u3.wallS-u1.wallS, 5.0+u1.cpuS*0.5; got < want || u3.cpuS-u1.cpuS < 4.0+u1.cpuS*0.5 {
		t.Errorf("after the third leg: %+v, want the first's %+v plus the killed leg's 5 s wall, 4 s CPU, plus its own", u3, u1)
	}
	led, _, _, _ = readLedger(ledgerPath, "v1")
	if led.Legs != 3 || led.Running != nil {
		t.Errorf("ledger %+v, want 3 legs and none running", led)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "sft-s1-train-sft.log"))
	for _, want := range []string{"leg one\n", "# leg 3, resumed ", "the last one was killed", "leg three\n"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}

	// A running leg writes its usage so far.
	done := make(chan error)
	go func() {
		_, err := stage(ctx, cfg, dir, "v1", "sft-s1-train-sft", burn("four")...)
		done <- err
	}()
	var running *legUsage
	for deadline := time.Now().Add(5 * time.Second); running == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(ledgerPath); err == nil && strings.Contains(string(b), `"running"`) {
			var raw ledger // read as written: readLedger would fold it
			if err := json.Unmarshal(b, &raw); err == nil {
				running = raw.Running
			}
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if running == nil || running.WallS <= 0 {
		t.Errorf("no running record while the fourth leg ran: %+v", running)
	}

	// A new version of the grid: its own log and usage.
	u5, err := stage(ctx, cfg, dir, "v2", "sft-s1-train-sft", burn("five")...)
	if err != nil {
		t.Fatal(err)
	}
	if u5.wallS > 4 || u5.cpuS > 3 {
		t.Errorf("new version: %+v, want one leg's (no 5 s of the killed leg)", u5)
	}
	log, _ = os.ReadFile(filepath.Join(dir, "sft-s1-train-sft.log"))
	if strings.Contains(string(log), "leg one") || !strings.Contains(string(log), "leg five") {
		t.Errorf("new version's log keeps the old one's legs:\n%s", log)
	}
}

// TestStageCorruptLedger: a ledger that cannot be read costs the earlier
// legs' usage, said in the log, not the log itself.
func TestStageCorruptLedger(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Bin: "/bin/sh"}
	if _, err := stage(context.Background(), cfg, dir, "v1", "cell", "-c", "echo leg one"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cell.usage.json"), []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := stage(context.Background(), cfg, dir, "v1", "cell", "-c", "echo leg two"); err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "cell.log"))
	for _, want := range []string{"leg one\n", "cell.usage.json: ", "earlier legs are not counted", "leg two\n"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if led, _, _, err := readLedger(filepath.Join(dir, "cell.usage.json"), "v1"); err != nil || led.Legs != 1 {
		t.Errorf("ledger after the leg: %+v, %v; want it rewritten with that leg", led, err)
	}
}
