package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

func wordCount(s string) int { return len(strings.Fields(s)) }

func wordTokens(steps []schemas.Step) []Tokens {
	return CountTokens(steps, wordCount, 2)
}

func TestBuildSFT(t *testing.T) {
	f := newFixture(t)
	steps, tasks := f.steps(t)
	tests := []struct {
		name string
		opts SFTOptions
		want SFTCounts
	}{
		{"default drop-refused", DefaultSFTOptions(), SFTCounts{Steps: 24, Kept: 8, FormatError: 6, Refused: 6, Duplicate: 3, TooLong: 1}},
		{"keep", SFTOptions{ErrorSteps: ErrorStepsKeep, MaxTokens: 1024, HeldOutValidation: true}, SFTCounts{Steps: 24, Kept: 14, FormatError: 6, Duplicate: 3, TooLong: 1}},
		{"drop", SFTOptions{ErrorSteps: ErrorStepsDrop, MaxTokens: 1024, HeldOutValidation: true}, SFTCounts{Steps: 24, Kept: 3, FormatError: 6, Refused: 12, Duplicate: 3}},
		{"no held-out validation", SFTOptions{ErrorSteps: ErrorStepsDropRefused, MaxTokens: 1024}, SFTCounts{Steps: 24, Kept: 5, FormatError: 6, Refused: 6, Duplicate: 2, TooLong: 1, HeldOut: 4}},
		{"no length limit", SFTOptions{ErrorSteps: ErrorStepsDropRefused, HeldOutValidation: true}, SFTCounts{Steps: 24, Kept: 9, FormatError: 6, Refused: 6, Duplicate: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, counts, err := BuildSFT(steps, wordTokens(steps), tasks, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if counts != tt.want {
				t.Errorf("counts: got %+v want %+v", counts, tt.want)
			}
			if len(got) != tt.want.Kept {
				t.Errorf("got %d examples, want %d", len(got), tt.want.Kept)
			}
			ids := map[string]bool{}
			for _, e := range got {
				if ids[e.ExampleID] {
					t.Errorf("example id %s twice", e.ExampleID)
				}
				ids[e.ExampleID] = true
				if want := tasks[e.TaskID].Split; e.Split != want {
					t.Errorf("example %s: split %q, want its task's %q", e.ExampleID, e.Split, want)
				}
				if e.Prompt == "" || e.FullPrompt == "" || e.Response == "" || e.PromptTokens != int32(wordCount(e.Prompt)) || e.ResponseTokens != int32(wordCount(e.Response)) {
					t.Errorf("example %s: incomplete or miscounted: %+v", e.ExampleID, e)
				}
				if e.Outcome == outcomeFormatError {
					t.Errorf("example %s: a format error was kept", e.ExampleID)
				}
			}
		})
	}
	t.Run("unknown task", func(t *testing.T) {
		delete(tasks, "beta")
		_, _, err := BuildSFT(steps, wordTokens(steps), tasks, DefaultSFTOptions())
		if err == nil || !strings.Contains(err.Error(), `task "beta" is not in the tasks dataset`) {
			t.Errorf("got %v, want an error naming the row's task", err)
		}
	})
}

func TestBuildRLStates(t *testing.T) {
	f := newFixture(t)
	steps, tasks := f.steps(t)
	tests := []struct {
		name string
		opts RLOptions
		want RLCounts
	}{
		{"every state", DefaultRLOptions(), RLCounts{Steps: 24, Kept: 14, HeldOut: 8, Duplicate: 2}},
		{"one per stratum", RLOptions{PerStratum: 1, Seed: 3}, RLCounts{Steps: 24, Kept: 8, HeldOut: 8, Duplicate: 2, Sampled: 6}},
		{"cap above stratum sizes", RLOptions{PerStratum: 5, Seed: 3}, RLCounts{Steps: 24, Kept: 14, HeldOut: 8, Duplicate: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, counts, err := BuildRLStates(steps, tasks, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if counts != tt.want || len(got) != tt.want.Kept {
				t.Errorf("counts: got %+v (%d rows) want %+v", counts, len(got), tt.want)
			}
			strata := map[string]int{}
			for _, s := range got {
				task := tasks[s.TaskID]
				if s.Split != schemas.HeldIn || task.Split != schemas.HeldIn {
					t.Errorf("state %s of %s task %s in the pool", s.StateID, task.Split, s.TaskID)
				}
				if s.SnapshotRef == "" || s.Metric != "accuracy" || s.MInit != 0.52 || s.MBest != 0.9 || s.MetricPrev == nil || s.ExpertAction == "" {
					t.Errorf("state %s incomplete: %+v", s.StateID, s)
				}
				strata[s.TaskID+"/"+string(rune('0'+s.StepIndex))]++
			}
			for k, n := range strata {
				if tt.opts.PerStratum > 0 && n > tt.opts.PerStratum {
					t.Errorf("stratum %s: %d states, cap %d", k, n, tt.opts.PerStratum)
				}
			}
		})
	}
	t.Run("seeded", func(t *testing.T) {
		pick := func(seed int64) []string {
			got, _, _ := BuildRLStates(steps, tasks, RLOptions{PerStratum: 1, Seed: seed})
			var ids []string
			for _, s := range got {
				ids = append(ids, s.StateID)
			}
			return ids
		}
		if a, b := pick(1), pick(1); !slices.Equal(a, b) {
			t.Errorf("same seed, different samples: %v vs %v", a, b)
		}
		differs := false
		for seed := int64(2); seed < 8; seed++ {
			differs = differs || !slices.Equal(pick(1), pick(seed))
		}
		if !differs {
			t.Errorf("seeds 1..7 all gave the same sample: the seed is not used")
		}
	})
}

func TestCheckNoLeak(t *testing.T) {
	tasks := map[string]schemas.Task{"in": {TaskID: "in", Split: schemas.HeldIn}, "out": {TaskID: "out", Split: schemas.HeldOut}}
	okSFT := []schemas.SFTExample{{ExampleID: "a", TaskID: "in", Split: schemas.HeldIn}, {ExampleID: "b", TaskID: "out", Split: schemas.HeldOut}}
	okRL := []schemas.RLState{{StateID: "a", TaskID: "in", Split: schemas.HeldIn}}
	tests := []struct {
		name       string
		sft        []schemas.SFTExample
		rl         []schemas.RLState
		validation bool
		wantLeak   bool
	}{
		{"clean", okSFT, okRL, true, false},
		{"held-out state", okSFT, []schemas.RLState{{StateID: "x", TaskID: "out", Split: schemas.HeldOut}}, true, true},
		{"held-out state labelled held-in", okSFT, []schemas.RLState{{StateID: "x", TaskID: "out", Split: schemas.HeldIn}}, true, true},
		{"held-out example labelled held-in", []schemas.SFTExample{{ExampleID: "x", TaskID: "out", Split: schemas.HeldIn}}, okRL, true, true},
		{"held-out example without validation", okSFT, okRL, false, true},
		{"unknown task", []schemas.SFTExample{{ExampleID: "x", TaskID: "nope", Split: schemas.HeldIn}}, okRL, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckNoLeak(tasks, tt.sft, tt.rl, tt.validation)
			if got := errors.Is(err, ErrHeldOut); got != tt.wantLeak {
				t.Errorf("got leak %v (%v), want %v", got, err, tt.wantLeak)
			}
		})
	}
}

func TestNewDist(t *testing.T) {
	edges := []float64{0, 1, 10}
	tests := []struct {
		name string
		xs   []float64
	}{
		{"empty", nil},
		{"one", []float64{5}},
		{"edges and outside", []float64{-3, 0, 0.5, 1, 9.99, 10, 11, 1e9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDist(tt.xs, edges)
			// Reference: a plain scan for each value's bin.
			want := make([]int, len(edges)+1)
			for _, x := range tt.xs {
				b := 0
				for b < len(edges) && x >= edges[b] {
					b++
				}
				want[b]++
			}
			if !reflect.DeepEqual(d.Counts, want) || d.N != len(tt.xs) {
				t.Errorf("counts: got %v (n %d) want %v (n %d)", d.Counts, d.N, want, len(tt.xs))
			}
			if len(tt.xs) > 0 {
				lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
				for _, x := range tt.xs {
					lo, hi, sum = min(lo, x), max(hi, x), sum+x
				}
				if d.Min != lo || d.Max != hi || math.Abs(d.Mean-sum/float64(len(tt.xs))) > 1e-9 {
					t.Errorf("got min %v max %v mean %v, want %v %v %v", d.Min, d.Max, d.Mean, lo, hi, sum/float64(len(tt.xs)))
				}
			}
		})
	}
}

func testRunConfig(root string) Config {
	cfg := DefaultConfig()
	cfg.Data, cfg.Workers = root, 2
	return cfg
}

// TestRunLeak runs the stage on the fixture, whose steps include a
// held-out task, and checks every dataset and export a trainer reads: no
// held-out task id anywhere but in sft_examples rows labelled held-out
// (the SFT trainer's validation split).
func TestRunLeak(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var report bytes.Buffer
	if err := run(ctx, testRunConfig(f.root), &report, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# sft_examples v1: 8 rows", "# rl_states v1: 14 rows", "Filter: 24 steps -> 8 kept"} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("printed report lacks %q:\n%s", want, report.String())
		}
	}
	heldOut := map[string]bool{}
	_, tasks := f.steps(t)
	for id, task := range tasks {
		if task.Split == schemas.HeldOut {
			heldOut[id] = true
		}
	}
	if len(heldOut) == 0 {
		t.Fatal("the fixture has no held-out task: the test would prove nothing")
	}
	containsHeldOut := func(s string) string {
		for id := range heldOut {
			if strings.Contains(s, id) {
				return id
			}
		}
		return ""
	}

	sftM, err := datasets.Latest(ctx, f.st, "sft_examples")
	if err != nil {
		t.Fatal(err)
	}
	sft, err := datasets.ReadAll[schemas.SFTExample](ctx, f.st, sftM, schemas.SFTExamples)
	if err != nil {
		t.Fatal(err)
	}
	validation := 0
	for _, e := range sft {
		if heldOut[e.TaskID] {
			validation++
			if e.Split != schemas.HeldOut {
				t.Errorf("sft example %s of held-out task %s labelled %q: the trainer would train on it", e.ExampleID, e.TaskID, e.Split)
			}
		} else if id := containsHeldOut(e.Prompt + e.FullPrompt + e.Response); id != "" {
			t.Errorf("held-in sft example %s mentions held-out task %s", e.ExampleID, id)
		}
	}
	if validation == 0 {
		t.Errorf("no held-out validation examples: want the fixture's held-out steps labelled held-out")
	}

	rlM, err := datasets.Latest(ctx, f.st, "rl_states")
	if err != nil {
		t.Fatal(err)
	}
	rl, err := datasets.ReadAll[schemas.RLState](ctx, f.st, rlM, schemas.RLStates)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rl {
		if heldOut[s.TaskID] || s.Split != schemas.HeldIn {
			t.Errorf("rl state %s of task %s (split %q): held-out data in the RL pool", s.StateID, s.TaskID, s.Split)
		}
		if id := containsHeldOut(s.Prompt + s.FullPrompt + s.ExpertAction); id != "" {
			t.Errorf("rl state %s mentions held-out task %s", s.StateID, id)
		}
	}
	if len(sft) != 8 || len(rl) != 14 {
		t.Errorf("got %d sft examples and %d rl states, want 8 and 14", len(sft), len(rl))
	}

	// The exports, read back.
	read := func(key string) []byte {
		b, err := store.ReadAll(ctx, f.st, key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sg := read("exports/sft_examples/v1/" + ShareGPTFile)
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(sg))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var rec ShareGPTRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("sharegpt line %d: %v", lines, err)
		}
		if len(rec.Conversations) != 2 || rec.Conversations[0].From != RoleHuman || !strings.HasPrefix(rec.Conversations[0].Value, "FULL PROMPT") {
			t.Errorf("sharegpt line %d: got %+v, want human (full prompt) then gpt", lines, rec.Conversations)
		}
		if id := containsHeldOut(sc.Text()); id != "" {
			t.Errorf("sharegpt line %d mentions held-out task %s", lines, id)
		}
		lines++
	}
	if want := len(sft) - validation; lines != want {
		t.Errorf("sharegpt export: got %d lines, want %d (the held-in examples)", lines, want)
	}
	var info map[string]LlamaFactoryDataset
	if err := json.Unmarshal(read("exports/sft_examples/v1/"+DatasetInfoFile), &info); err != nil || info[LlamaFactoryName].FileName != ShareGPTFile {
		t.Errorf("dataset_info.json: got %+v (%v), want %s -> %s", info, err, LlamaFactoryName, ShareGPTFile)
	}
	vb := read("exports/rl_states/v1/" + VerlTrainFile)
	verl, err := parquet.Read[VerlRow](bytes.NewReader(vb), int64(len(vb)))
	if err != nil {
		t.Fatal(err)
	}
	if len(verl) != len(rl) {
		t.Errorf("verl export: got %d rows, want %d", len(verl), len(rl))
	}
	for _, r := range verl {
		if heldOut[r.ExtraInfo.TaskID] || r.ExtraInfo.Split != schemas.HeldIn || containsHeldOut(r.Prompt[0].Content+r.RewardModel.GroundTruth) != "" {
			t.Errorf("verl row %d (task %s) carries a held-out task", r.ExtraInfo.Index, r.ExtraInfo.TaskID)
		}
	}
	// The validation file: the held-out task's expert states, and only those.
	vb = read("exports/rl_states/v1/" + VerlValFile)
	val, err := parquet.Read[VerlRow](bytes.NewReader(vb), int64(len(vb)))
	if err != nil {
		t.Fatal(err)
	}
	if len(val) == 0 {
		t.Errorf("verl validation file is empty: want the held-out task's states")
	}
	for _, r := range val {
		if !heldOut[r.ExtraInfo.TaskID] || r.ExtraInfo.Split != schemas.HeldOut || r.ExtraInfo.StateID != "" {
			t.Errorf("verl validation row %d: extra_info %+v, want a held-out task without state_id", r.ExtraInfo.Index, r.ExtraInfo)
		}
	}

	// Manifests: lineage, attachments, stats beside the version.
	for _, m := range []*datasets.Manifest{sftM, rlM} {
		var names []string
		for _, p := range m.Parents {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		if want := []string{"ideas", "steps", "tasks"}; !slices.Equal(names, want) {
			t.Errorf("%s parents: got %v want %v", m.Name, names, want)
		}
		atts, err := attachmentsOf(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range atts {
			if ok, err := sameObject(ctx, f.st, a); err != nil || !ok {
				t.Errorf("%s attachment %s: checksum does not match the object (%v)", m.Name, a.Key, err)
			}
		}
		if want := map[string]int{"sft_examples": 4, "rl_states": 3}[m.Name]; len(atts) != want {
			t.Errorf("%s: got %d attachments want %d", m.Name, len(atts), want)
		}
		md := string(read(datasets.Dir(m.Name, m.Version) + "/stats.md"))
		if !strings.Contains(md, "| alpha | held-in |") || !strings.Contains(md, "Expert step reward") {
			t.Errorf("%s stats.md lacks the per-task table or reward histogram:\n%s", m.Name, md)
		}
	}

	// A second run with the same inputs writes nothing new.
	if err := run(ctx, testRunConfig(f.root), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sft_examples", "rl_states"} {
		all, _, err := datasets.Versions(ctx, f.st, name)
		if err != nil || len(all) != 1 {
			t.Errorf("%s: versions %v (%v) after a rerun, want [1]", name, all, err)
		}
	}
}

func TestRunRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		prepare func(t *testing.T, f fixture) Config
		wantMsg string
	}{
		{"duplicate step", func(t *testing.T, f fixture) Config {
			steps, _ := f.steps(t)
			commitRows(t, f.st, "steps", schemas.Steps, append(steps, steps[3]), f.tasksM.Ref())
			return testRunConfig(f.root)
		}, "two rows are trajectory alpha-0000 step 3"},
		{"no tasks parent", func(t *testing.T, f fixture) Config {
			steps, _ := f.steps(t)
			commitRows(t, f.st, "steps", schemas.Steps, steps)
			return testRunConfig(f.root)
		}, "names no tasks version"},
		{"task missing from the given tasks", func(t *testing.T, f fixture) Config {
			_, tasks := f.steps(t)
			commitRows(t, f.st, "tasks", schemas.Tasks, []schemas.Task{tasks["alpha"]})
			cfg := testRunConfig(f.root)
			cfg.Tasks = "tasks/v2"
			return cfg
		}, `task "beta" is not in the tasks dataset`},
		{"steps manifest lost", func(t *testing.T, f fixture) Config {
			os.Remove(filepath.Join(f.root, "steps", "v1", datasets.ManifestFile))
			return testRunConfig(f.root)
		}, "dataset: steps (written by `mlerl rollout`): ROOT/steps: no committed dataset: v1 has neither _MANIFEST.json nor _PENDING.json (its manifest was lost?); rerun the stage that writes \"steps\" with the same config to resume or repair it"},
		{"no steps", func(t *testing.T, f fixture) Config {
			os.RemoveAll(filepath.Join(f.root, "steps"))
			return testRunConfig(f.root)
		}, "dataset: steps (written by `mlerl rollout`): ROOT/steps: no committed dataset: nothing is there (run the stage that writes \"steps\" first, or see `mlerl ls <data root>`)"},
		{"bad error_steps", func(t *testing.T, f fixture) Config {
			cfg := testRunConfig(f.root)
			cfg.ErrorSteps = "sometimes"
			return cfg
		}, `error_steps "sometimes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			err := run(ctx, tt.prepare(t, f), io.Discard, io.Discard)
			// A want starting with "dataset: " is the whole message; others a part of it.
			want := strings.ReplaceAll(tt.wantMsg, "ROOT", f.root)
			if err == nil || !strings.Contains(err.Error(), want) || (strings.HasPrefix(want, "dataset: ") && err.Error() != want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantMsg)
			}
			if _, _, err := datasets.Versions(ctx, f.st, "sft_examples"); err == nil {
				if m, err := datasets.Latest(ctx, f.st, "sft_examples"); err == nil {
					t.Errorf("a version was committed despite the error: %s v%d", m.Name, m.Version)
				}
			}
		})
	}
}

// TestRLStatesScorePublicPart: a task ingested with a public and a
// private part of its hidden answers gives its RL states, and the verl
// export's ground truth built from them, the public part's m_init and
// m_best (what the environment's rewards use), never the scores on all
// answers: with the public ones, those would give away the private
// part's to whoever trains on the export.
func TestRLStatesScorePublicPart(t *testing.T) {
	f := newFixture(t)
	steps, tasks := f.steps(t)
	ptr := func(v float64) *float64 { return &v }
	for id, task := range tasks {
		task.MInit, task.MInitTest, task.MBest = 0.61, 0.61, 0.95 // all hidden answers
		task.MInitPublic, task.MInitPrivate, task.MBestPublic, task.MBestPrivate = ptr(0.52), ptr(0.70), ptr(0.9), ptr(1)
		tasks[id] = task
	}
	rl, _, err := BuildRLStates(steps, tasks, DefaultRLOptions())
	if err != nil || len(rl) == 0 {
		t.Fatalf("%d states, %v", len(rl), err)
	}
	for _, s := range rl {
		if s.MInit != 0.52 || s.MBest != 0.9 {
			t.Errorf("state %s: m_init %v m_best %v, want the public part's 0.52 and 0.9", s.StateID, s.MInit, s.MBest)
		}
	}
	var buf bytes.Buffer
	if err := WriteVerl(&buf, rl, DefaultVerlOptions()); err != nil {
		t.Fatal(err)
	}
	rows, err := parquet.Read[VerlRow](bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		var gt VerlGroundTruth
		if err := json.Unmarshal([]byte(r.RewardModel.GroundTruth), &gt); err != nil {
			t.Fatal(err)
		}
		if gt.MInit != 0.52 || gt.MBest != 0.9 || strings.Contains(r.RewardModel.GroundTruth, "0.61") || strings.Contains(r.RewardModel.GroundTruth, "0.95") {
			t.Errorf("ground truth %s: want the public part's scores only", r.RewardModel.GroundTruth)
		}
	}
}
