package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// writeSFTExamples commits a small synthetic sft_examples dataset: the
// response repeats a word of the prompt.
func writeSFTExamples(t *testing.T, root string, n int) {
	t.Helper()
	words := []string{"alpha", "beta", "gamma", "delta", "eps"}
	var rows []schemas.SFTExample
	for i := range n {
		w := words[i%len(words)]
		split := schemas.HeldIn
		if i%4 == 3 {
			split = schemas.HeldOut
		}
		rows = append(rows, schemas.SFTExample{ExampleID: fmt.Sprint(i), TaskID: "t", Split: split,
			Prompt: "echo " + w + ":", Response: " " + w + " " + w})
	}
	commitSFTExamples(t, root, rows)
}

// commitSFTExamples commits rows as a version of sft_examples in root.
func commitSFTExamples(t *testing.T, root string, rows []schemas.SFTExample) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	p, err := datasets.Begin(ctx, st, schemas.SFTExamples.Name, schemas.SFTExamples, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.WritePart(ctx, p, "part-00000.parquet", rows); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(ctx, datasets.CommitOptions{}); err != nil {
		t.Fatal(err)
	}
}

func tinySFTConfig(root string) SFTConfig {
	cfg := DefaultSFTConfig()
	cfg.Data = root
	cfg.Tokenizer = "bytes"
	cfg.Response = policy.ResponseFull
	cfg.Model = policy.Config{DModel: 32, Heads: 2, Layers: 1, Ctx: 64, PromptTokens: 40, ResponseTokens: 20}
	cfg.Optim.LR = 3e-3
	cfg.Optim.WarmupSteps = 2
	cfg.BatchRows = 2
	cfg.Epochs = 3
	return cfg
}

func readMetrics(t testing.TB, root, dir string) []map[string]any {
	t.Helper()
	st, _ := store.Open(context.Background(), root)
	b, err := store.ReadAll(context.Background(), st, dir+"/metrics.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestSFTLearnsAndValidates(t *testing.T) {
	root := t.TempDir()
	writeSFTExamples(t, root, 40)
	var log bytes.Buffer
	if err := runSFT(context.Background(), tinySFTConfig(root), &log); err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, root, "checkpoints/sft")
	var first, last float64
	var vals []float64
	for _, m := range ms {
		if v, ok := m["losses/sft"].(float64); ok {
			if first == 0 {
				first = v
			}
			last = v
		}
		if v, ok := m["losses/val"].(float64); ok {
			vals = append(vals, v)
		}
	}
	if len(vals) != 3 {
		t.Fatalf("got %d validation losses, want one per epoch (3); log:\n%s", len(vals), log.String())
	}
	if !(last < first*0.7) {
		t.Errorf("training loss went from %.3f to %.3f, want a clear decrease", first, last)
	}
	if !(vals[2] < vals[0]) {
		t.Errorf("validation loss went from %.3f to %.3f, want a decrease", vals[0], vals[2])
	}
}

// TestSFTMatmulRecorded: --matmul bf16 trains (on the plain-Go bf16
// kernel where the CPU lacks AVX512_BF16), the log says which products
// ran, and every checkpoint's config records the resolved mode, not
// "auto": with auto left to the CPU (policy.AutoPrecision) and forced
// each way (MLERL_AUTO_PRECISION).
func TestSFTMatmulRecorded(t *testing.T) {
	for _, tc := range []struct{ mode, forced string }{
		{policy.MatmulBF16, ""}, {policy.MatmulAuto, ""}, {policy.MatmulAuto, policy.MatmulFP32}, {policy.MatmulAuto, policy.MatmulBF16},
	} {
		t.Setenv(policy.AutoPrecisionEnv, tc.forced)
		mode := tc.mode
		root := t.TempDir()
		writeSFTExamples(t, root, 40)
		cfg := tinySFTConfig(root)
		cfg.Matmul = mode
		var log bytes.Buffer
		if err := runSFT(context.Background(), cfg, &log); err != nil {
			t.Fatal(err)
		}
		want := policy.MatmulBF16
		if mode == policy.MatmulAuto {
			want = tc.forced
			if want == "" {
				want, _ = policy.AutoPrecision()
			}
		}
		if !strings.Contains(log.String(), "("+want+" products)") {
			t.Errorf("matmul %s: the log does not say %q:\n%s", mode, "("+want+" products)", log.String())
		}
		var configs int
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Name() != "config.json" {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			var c struct{ Matmul string }
			if err := json.Unmarshal(b, &c); err != nil {
				return err
			}
			if c.Matmul != want {
				t.Errorf("matmul %s: %s records %q, want %q", mode, p, c.Matmul, want)
			}
			configs++
			return nil
		})
		if err != nil || configs == 0 {
			t.Fatalf("matmul %s: %d checkpoint configs read (%v)", mode, configs, err)
		}
		ms := readMetrics(t, root, "checkpoints/sft")
		var first, last float64
		for _, m := range ms {
			if v, ok := m["losses/sft"].(float64); ok {
				if first == 0 {
					first = v
				}
				last = v
			}
		}
		if !(last < first*0.7) {
			t.Errorf("matmul %s: training loss went from %.3f to %.3f, want a clear decrease", mode, first, last)
		}
	}
}

func TestPackBatches(t *testing.T) {
	exs := []encoded{
		{Tokens: []int32{2, 10, 11, 3}, Response: 2},
		{Tokens: []int32{2, 12, 3}, Response: 2, Weight: 0.25}, // a plan variant's share
		{Tokens: []int32{2, 13, 14, 15, 16, 3}, Response: 3},
	}
	bs := packBatches(exs, []int{0, 1, 2}, 2, 8)
	if len(bs) != 1 {
		t.Fatalf("got %d batches want 1", len(bs))
	}
	b := bs[0]
	// Row 0: examples 0 and 1 (7 tokens); row 1: example 2 (6 tokens).
	if b.B != 2 || b.S != 8 {
		t.Fatalf("got batch %dx%d want 2x8", b.B, b.S)
	}
	wantSeg := []int32{1, 1, 1, 1, 2, 2, 2, 0, 1, 1, 1, 1, 1, 1, 0, 0}
	wantPos := []int32{0, 1, 2, 3, 0, 1, 2, 0, 0, 1, 2, 3, 4, 5, 0, 0}
	wantW := []float32{0, 1, 1, 0, 0, 0.25, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0}
	for i := range wantSeg {
		if b.Segments[i] != wantSeg[i] || b.Positions[i] != wantPos[i] || b.Weights[i] != wantW[i] {
			t.Fatalf("position %d: got seg %d pos %d weight %v, want %d %d %v", i, b.Segments[i], b.Positions[i], b.Weights[i], wantSeg[i], wantPos[i], wantW[i])
		}
	}
	if b.Real != 13 || b.NumTargets != 6 {
		t.Errorf("got real %d targets %d, want 13 and 6", b.Real, b.NumTargets)
	}
	// First fit: lengths 5, 6, 3 in a context of 8 need 2 rows (5+3, 6),
	// not the 3 of sequential packing.
	mk := func(n int) encoded { return encoded{Tokens: make([]int32, n), Response: 1} }
	bs = packBatches([]encoded{mk(5), mk(6), mk(3)}, []int{0, 1, 2}, 4, 8)
	if len(bs) != 1 || bs[0].B != 2 || bs[0].Starts[2] != 5 {
		t.Errorf("first fit: got %d batches, %d rows, example 2 at %d; want 1 batch of 2 rows with example 2 at 5", len(bs), bs[0].B, bs[0].Starts[2])
	}
}

func TestSFTResumeIsExact(t *testing.T) {
	ctx := context.Background()
	full, split := t.TempDir(), t.TempDir()
	writeSFTExamples(t, full, 24)
	writeSFTExamples(t, split, 24)
	var log bytes.Buffer
	if err := runSFT(ctx, tinySFTConfig(full), &log); err != nil {
		t.Fatal(err)
	}
	// Stop mid-epoch, then resume in a fresh process state (new policy,
	// new graphs, everything from the checkpoint).
	cfg := tinySFTConfig(split)
	cfg.MaxSteps = 5
	if err := runSFT(ctx, cfg, &log); err != nil {
		t.Fatal(err)
	}
	cfg.MaxSteps = 0
	if err := runSFT(ctx, cfg, &log); err != nil {
		t.Fatal(err)
	}
	wa, sa := readWeights(t, full, "checkpoints/sft")
	wb, sb := readWeights(t, split, "checkpoints/sft")
	if sa != sb {
		t.Fatalf("final checkpoints: got %s after resuming, want %s", sb, sa)
	}
	if len(wa) != len(wb) {
		t.Fatalf("got %d variables after resuming, want %d", len(wb), len(wa))
	}
	for path, a := range wa {
		if !bytes.Equal(a, wb[path]) {
			t.Errorf("variable %s after stop-and-resume differs from an uninterrupted run", path)
		}
	}
	la, lb := readMetrics(t, full, "checkpoints/sft"), readMetrics(t, split, "checkpoints/sft")
	// The stop at max_steps validated the model it left (one record the
	// uninterrupted run has not); every other line is the same.
	var stops int
	lb = slices.DeleteFunc(lb, func(m map[string]any) bool {
		stop := m["losses/val"] != nil && m["step"] == 5.0
		if stop {
			stops++
		}
		return stop
	})
	if stops != 1 {
		t.Errorf("got %d validation records at the max_steps stop (update 5), want 1", stops)
	}
	if len(la) != len(lb) {
		t.Fatalf("metrics: got %d lines after resuming, want %d", len(lb), len(la))
	}
	for i := range la {
		for _, k := range []string{"losses/sft", "losses/val", "step"} {
			if la[i][k] != lb[i][k] {
				t.Errorf("metrics line %d %s: got %v after resuming, want %v", i, k, lb[i][k], la[i][k])
			}
		}
	}
}

// readWeights returns the latest checkpoint's variables by path, and its name.
func readWeights(t *testing.T, root, dir string) (map[string][]byte, string) {
	t.Helper()
	ctx := context.Background()
	st, _ := store.Open(ctx, root)
	latest, err := policy.LatestCheckpoint(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := store.ReadAll(ctx, st, latest+"/weights.bin")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := store.ReadAll(ctx, st, latest+"/weights.json")
	if err != nil {
		t.Fatal(err)
	}
	var vars []struct {
		Path          string
		Offset, Bytes int64
	}
	if err := json.Unmarshal(idx, &vars); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, v := range vars {
		out[v.Path] = bin[v.Offset : v.Offset+v.Bytes]
	}
	return out, latest[strings.LastIndex(latest, "/")+1:]
}

// TestSFTResumeAfterSIGKILL runs SFT in a child process that SIGKILLs
// itself after update 7 (checkpoints every 3 updates, so the last complete
// one is at 6 and update 7 is lost), resumes it here, and compares the
// final weights with an uninterrupted run.
func TestSFTResumeAfterSIGKILL(t *testing.T) {
	if root := os.Getenv("MLERL_SFT_KILL_ROOT"); root != "" {
		afterSFTStep = func(step int) {
			if step == 7 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
		cfg := tinySFTConfig(root)
		cfg.CheckpointEvery = 3
		if err := runSFT(context.Background(), cfg, io.Discard); err != nil {
			t.Fatal(err)
		}
		return
	}
	ctx := context.Background()
	full, killed := t.TempDir(), t.TempDir()
	writeSFTExamples(t, full, 24)
	writeSFTExamples(t, killed, 24)
	cfg := tinySFTConfig(full)
	cfg.CheckpointEvery = 3
	if err := runSFT(ctx, cfg, io.Discard); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSFTResumeAfterSIGKILL$")
	cmd.Env = append(os.Environ(), "MLERL_SFT_KILL_ROOT="+killed)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: got %v, want death by SIGKILL; output:\n%s", err, out)
	}
	if _, name := readWeights(t, killed, "checkpoints/sft"); name != "step-000000006" {
		t.Fatalf("after the kill the latest checkpoint is %s, want step-000000006", name)
	}
	cfg.Data = killed
	if err := runSFT(ctx, cfg, io.Discard); err != nil {
		t.Fatal(err)
	}
	wa, sa := readWeights(t, full, "checkpoints/sft")
	wb, sb := readWeights(t, killed, "checkpoints/sft")
	if sa != sb || len(wa) != len(wb) {
		t.Fatalf("got %s with %d variables after the kill, want %s with %d", sb, len(wb), sa, len(wa))
	}
	for path, a := range wa {
		if !bytes.Equal(a, wb[path]) {
			t.Errorf("variable %s after kill and resume differs from an uninterrupted run", path)
		}
	}
}

// TestExampleWeights: an example's weight (a plan variant's share) reaches
// its response tokens; no weight is 1; a weight that is not a positive
// number is refused, naming the example.
func TestExampleWeights(t *testing.T) {
	tok := policy.ByteTokenizer{}
	vocab := policy.BuildVocab(tok, []string{"echo alpha: alpha"}, 1)
	mc := policy.Config{Vocab: vocab.Size(), DModel: 16, Heads: 2, Layers: 1, Ctx: 64, PromptTokens: 40, ResponseTokens: 20}
	quarter := 0.25
	rs := []schemas.SFTExample{{ExampleID: "real", Prompt: "echo alpha:", Response: " alpha"}, {ExampleID: "variant", Prompt: "echo alpha:", Response: " alpha", Weight: &quarter}}
	exs, _, err := encodeExamples(policy.NewMLERL(mc, vocab, tok), "test", rs)
	if err != nil {
		t.Fatal(err)
	}
	b := packBatches(exs, []int{0, 1}, 2, mc.Ctx)[0]
	_, _, ws, _ := b.targets()
	sum := map[float32]int{}
	for _, w := range ws {
		sum[w]++
	}
	if n := len(ws) / 2; sum[1] != n || sum[0.25] != n {
		t.Errorf("target weights %v: want %d at 1 (no weight) and %d at 0.25", sum, n, n)
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		rs[1].Weight = &bad
		if _, _, err := encodeExamples(policy.NewMLERL(mc, vocab, tok), "test", rs); err == nil || !strings.Contains(err.Error(), "example variant: weight") {
			t.Errorf("weight %v: got %v, want an error naming the example", bad, err)
		}
	}
}

// TestSFTMaxStepsWritesMerged: a Hugging Face policy's SFT stopped at
// max_steps writes save_merged's folder with the model it stopped with
// (before, only the last epoch wrote it, silently), and the resumed run
// replaces it with the finished model.
func TestSFTMaxStepsWritesMerged(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeSFTExamples(t, root, 12)
	cfg := DefaultSFTConfig()
	cfg.Data, cfg.Response = root, policy.ResponseFull
	cfg.Policy = "hf:" + filepath.Join("..", "policy", "hf", "testdata", "ckpt", "llama")
	cfg.Model.Ctx, cfg.Model.PromptTokens, cfg.Model.ResponseTokens = 320, 256, 32
	cfg.Tuning.LoRA.Rank, cfg.Tuning.LoRA.Alpha, cfg.Tuning.BaseStorage = 4, 8, policy.MatmulFP32
	cfg.Optim.LR = 1e-2
	cfg.BatchRows, cfg.Epochs, cfg.MaxSteps = 2, 3, 2
	cfg.SaveMerged = filepath.Join(t.TempDir(), "merged")
	var log bytes.Buffer
	if err := runSFT(ctx, cfg, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "save_merged: writing the model at update 2 of") {
		t.Errorf("the log does not say which model the merged folder holds:\n%s", log.String())
	}
	weights := filepath.Join(cfg.SaveMerged, "model.safetensors")
	early, err := os.ReadFile(weights)
	if err != nil {
		t.Fatalf("stopped at max_steps with save_merged: %v\nlog:\n%s", err, log.String())
	}
	cfg.MaxSteps = 0
	if err := runSFT(ctx, cfg, &log); err != nil {
		t.Fatalf("resuming into the run's own merged folder: %v", err)
	}
	done, err := os.ReadFile(weights)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(early, done) {
		t.Error("the resumed run left the merged folder of update 2 in place of the finished model")
	}
}
