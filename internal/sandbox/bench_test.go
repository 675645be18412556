package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkExec measures per-execution latency, cold (a fresh python per
// run) against warm (a forked child of the warm worker), on small scripts
// and on every built-in task's train.py. Each sub-benchmark reports the
// median run in ms ("median-ms"); the warm/cold ratio is the quotient of
// the two medians of one script. Run with e.g.
//
//	go test -run '^$' -bench Exec -benchtime 5x ./internal/sandbox/
func BenchmarkExec(b *testing.B) {
	py := python(b)
	type script struct {
		name string
		dir  string
	}
	var scripts []script
	for name, src := range map[string]string{
		"print":   "print('hello')\n",
		"sklearn": "import numpy as np\nfrom sklearn.datasets import load_digits\nfrom sklearn.linear_model import LogisticRegression\nX, y = load_digits(return_X_y=True)\nm = LogisticRegression(max_iter=200).fit(X[:300], y[:300])\nprint('VAL_METRIC accuracy %.4f' % m.score(X[300:600], y[300:600]))\n",
	} {
		dir := b.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(src), 0o644); err != nil {
			b.Fatal(err)
		}
		scripts = append(scripts, script{name, dir})
	}
	sort.Slice(scripts, func(i, j int) bool { return scripts[i].name < scripts[j].name })
	tasks, _ := filepath.Glob("../../tasks/*/workspace/train.py")
	for _, t := range tasks {
		ws := filepath.Dir(t)
		dir := b.TempDir()
		if err := os.CopyFS(dir, os.DirFS(ws)); err != nil {
			b.Fatal(err)
		}
		scripts = append(scripts, script{"task=" + filepath.Base(filepath.Dir(ws)), dir})
	}
	cold := NewCold(py)
	defer cold.Close()
	warm, err := NewWarm(context.Background(), py)
	if err != nil {
		b.Fatal(err)
	}
	defer warm.Close()
	for _, s := range scripts {
		for _, r := range []struct {
			name string
			r    Runner
		}{{"cold", cold}, {"warm", warm}} {
			b.Run(s.name+"/"+r.name, func(b *testing.B) {
				var durs []time.Duration
				for i := 0; i < b.N; i++ {
					start := time.Now()
					res, err := r.r.Run(context.Background(), Request{Dir: s.dir, Script: "train.py", Limits: Limits{Timeout: 2 * time.Minute}})
					durs = append(durs, time.Since(start))
					if err != nil || res.Outcome != Success {
						b.Fatalf("%v %s %s", err, res.Outcome, lastLines(res.Stderr, 3))
					}
				}
				sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
				b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "median-ms")
			})
		}
	}
}

// BenchmarkKernelQuota measures what a workspace tmpfs of its own costs a
// run (space.go: the mounts, the control message, measuring the workspace
// as the run left it and copying its changes back) against the measured
// quota alone, on the warm runner: one run of each kind per iteration,
// alternating, on a tiny script (where the cost shows) and on every
// built-in task's train.py (which writes its submission). Reports each
// kind's median run and the median of the per-iteration differences
// ("overhead-ms"). Run with e.g.
//
//	go test -run '^$' -bench KernelQuota -benchtime 5x ./internal/sandbox/
func BenchmarkKernelQuota(b *testing.B) {
	py := python(b)
	if !KernelQuota(py) {
		b.Skip("no workspace tmpfs at this isolation level")
	}
	kernel, err := NewWarm(context.Background(), py)
	if err != nil {
		b.Fatal(err)
	}
	defer kernel.Close()
	measured, err := NewWarm(context.Background(), py)
	if err != nil {
		b.Fatal(err)
	}
	defer measured.Close()
	measured.(*warmRunner).h.space = false
	type script struct{ name, dir string }
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte("open('submission.csv', 'w').write('id,y\\n1,2\\n')\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	scripts := []script{{"tiny", dir}}
	tasks, _ := filepath.Glob("../../tasks/*/workspace/train.py")
	for _, t := range tasks {
		ws := filepath.Dir(t)
		dir := b.TempDir()
		if err := os.CopyFS(dir, os.DirFS(ws)); err != nil {
			b.Fatal(err)
		}
		scripts = append(scripts, script{"task=" + filepath.Base(filepath.Dir(ws)), dir})
	}
	run := func(b *testing.B, r Runner, dir string) time.Duration {
		start := time.Now()
		res, err := r.Run(context.Background(), Request{Dir: dir, Script: "train.py", Limits: Limits{Timeout: 2 * time.Minute}})
		if err != nil || res.Outcome != Success {
			b.Fatalf("%v %s %s", err, res.Outcome, lastLines(res.Stderr, 3))
		}
		return time.Since(start)
	}
	median := func(d []time.Duration) float64 {
		d = append([]time.Duration(nil), d...)
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	for _, s := range scripts {
		b.Run(s.name, func(b *testing.B) {
			var k, m, diff []time.Duration
			for i := 0; i < b.N; i++ {
				var dk, dm time.Duration
				if i%2 == 0 {
					dk, dm = run(b, kernel, s.dir), run(b, measured, s.dir)
				} else {
					dm, dk = run(b, measured, s.dir), run(b, kernel, s.dir)
				}
				k, m, diff = append(k, dk), append(m, dm), append(diff, dk-dm)
			}
			b.ReportMetric(median(k), "kernel-ms")
			b.ReportMetric(median(m), "measured-ms")
			b.ReportMetric(median(diff), "overhead-ms")
		})
	}
}
