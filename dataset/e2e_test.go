package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/ingest"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/rollout"
	"github.com/mlerl/mlerl/schemas"
)

// e2eTasks: one held-in and one held-out built-in task.
var e2eTasks = []string{"wine-cultivar", "election-vote"}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// rolledOut runs the ingest stage on the e2e tasks (3 kept catalog ideas
// per category), then rolls out 2 short scripted
// trajectories per task, held-out ones included (rollout split=all).
func rolledOut(t *testing.T) string {
	t.Helper()
	if _, err := sandbox.FindPython(""); err != nil {
		t.Skipf("no task runtime: %v", err)
	}
	if _, err := tokenizer.Default(); err != nil {
		t.Skipf("no tokenizer: %v", err)
	}
	ctx := context.Background()
	root := t.TempDir()
	tc := ingest.DefaultTasksConfig()
	tc.Data, tc.Suite, tc.Only = root, filepath.Join(repoRoot(), "tasks"), e2eTasks
	if err := ingest.RunTasks(ctx, tc); err != nil {
		t.Fatalf("ingest tasks: %v", err)
	}
	ic := ingest.DefaultIdeasConfig()
	ic.Data, ic.K = root, 3
	if err := ingest.RunIdeas(ctx, ic); err != nil {
		t.Fatalf("ingest ideas: %v", err)
	}
	rc := rollout.DefaultConfig()
	rc.Data, rc.Split, rc.PerTask, rc.Seed, rc.Workers = root, "all", 2, 7, 2
	rc.Env.MaxSteps = 6
	if err := rollout.Run(ctx, rc); err != nil {
		t.Fatalf("rollout: %v", err)
	}
	return root
}

// TestDatasetEndToEnd: ingest -> rollout -> dataset on two real tasks,
// then publish rl_states to fake GCS and restore a state from there.
func TestDatasetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rollout")
	}
	start := time.Now()
	root := rolledOut(t)
	ctx := context.Background()
	t0 := time.Now()
	var report bytes.Buffer
	if err := run(ctx, testRunConfig(root), &report, io.Discard); err != nil {
		t.Fatal(err)
	}
	t.Logf("setup (ingest + rollout) %s, dataset stage %s", t0.Sub(start).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	st, _ := store.Open(ctx, root)
	steps, err := datasets.ReadAll[schemas.Step](ctx, st, mustLatest(t, st, "steps"), schemas.Steps)
	if err != nil {
		t.Fatal(err)
	}
	sft, err := datasets.ReadAll[schemas.SFTExample](ctx, st, mustLatest(t, st, "sft_examples"), schemas.SFTExamples)
	if err != nil {
		t.Fatal(err)
	}
	rl, rlM := readStates(t, st)
	var parents []string
	for _, p := range rlM.Parents {
		parents = append(parents, p.Name)
	}
	slices.Sort(parents)
	if want := []string{"ideas", "steps", "tasks", "trajectories"}; !slices.Equal(parents, want) {
		t.Errorf("rl_states lineage: got %v want %v", parents, want)
	}
	if len(sft) == 0 || len(rl) == 0 {
		t.Fatalf("got %d sft examples and %d rl states from %d steps", len(sft), len(rl), len(steps))
	}

	// Token counts are the real tokenizer's.
	tok, _ := tokenizer.Default()
	splits := map[string]int{}
	for _, e := range sft {
		splits[e.Split]++
		if got, want := int(e.PromptTokens), tok.Count(e.Prompt); got != want {
			t.Errorf("example %s: prompt_tokens %d, tokenizer says %d", e.ExampleID, got, want)
		}
		if got, want := int(e.ResponseTokens), tok.Count(e.Response); got != want {
			t.Errorf("example %s: response_tokens %d, tokenizer says %d", e.ExampleID, got, want)
		}
	}
	if splits[schemas.HeldIn] == 0 || splits[schemas.HeldOut] == 0 {
		t.Errorf("sft splits %v: want both held-in (wine-cultivar) and held-out validation (election-vote)", splits)
	}
	heldInSteps := 0
	for _, s := range steps {
		if s.TaskID == "wine-cultivar" {
			heldInSteps++
		}
	}
	for _, s := range rl {
		if s.TaskID != "wine-cultivar" {
			t.Errorf("rl state %s of task %s: want held-in wine-cultivar only", s.StateID, s.TaskID)
		}
	}
	if len(rl) > heldInSteps {
		t.Errorf("%d rl states from %d held-in steps", len(rl), heldInSteps)
	}
	for _, key := range []string{"exports/sft_examples/v1/" + ShareGPTPolicyFile, "exports/sft_examples/v1/" + ShareGPTFile, "exports/sft_examples/v1/" + DatasetInfoFile, "exports/rl_states/v1/" + VerlTrainFile, "sft_examples/v1/stats.md", "rl_states/v1/stats.md"} {
		if ok, err := store.Exists(ctx, st, key); err != nil || !ok {
			t.Errorf("%s not written (%v)", key, err)
		}
	}
	if !strings.Contains(report.String(), "| election-vote | held-out |") {
		t.Errorf("report lacks the held-out validation rows:\n%s", report.String())
	}
	checkExports(t, st, tok, PromptPolicy, 1, rl)
	checkInitialStates(t, st, steps)

	// The full prompt on request: 4-8k tokens, over verl's default
	// max_prompt_length, so the stage warns and stats.md says so.
	cfg := testRunConfig(root)
	cfg.VerlPrompt = string(PromptFull)
	var log bytes.Buffer
	if err := run(ctx, cfg, io.Discard, &log); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{VerlTrainFile, VerlValFile} {
		if !strings.Contains(log.String(), "dataset: warning: ") || !strings.Contains(log.String(), "prompts of "+f+" are longer than verl's data.max_prompt_length 512 tokens") {
			t.Errorf("full prompts: no warning about %s in the log:\n%s", f, log.String())
		}
	}
	rl2, _ := readStates(t, st)
	checkExports(t, st, tok, PromptFull, 2, rl2)

	// Shared through a bucket, a state restores there exactly.
	shared := fakeGCS(t)("team")
	if _, err := Publish(ctx, st, shared, "rl_states", 1, PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	s := rl[len(rl)/2]
	ecfg := env.DefaultConfig()
	ecfg.Runner = sandbox.NewCold("/usr/bin/python3")
	e, err := env.Restore(ctx, ecfg, shared, s.SnapshotRef)
	if err != nil {
		t.Fatalf("restore %s from the published root: %v", s.StateID, err)
	}
	defer e.Close()
	if e.Steps() != int(s.StepIndex) || s.MetricPrev == nil || e.Current() != *s.MetricPrev {
		t.Errorf("restored state %s: got steps %d current %v, want steps %d current %v", s.StateID, e.Steps(), e.Current(), s.StepIndex, s.MetricPrev)
	}
}

// checkExports reads the exports of rl_states and sft_examples version v
// as verl and LLaMA-Factory would (Arrow for the verl Parquet files, JSON
// for the ShareGPT lines and dataset_info.json), checks the columns they
// need, re-tokenizes every prompt as a chat template renders it and
// checks that the prompt lengths stats.md and the manifests report are
// those.
func checkExports(t *testing.T, st store.Store, tok *tokenizer.Tokenizer, form PromptForm, v int, rl []schemas.RLState) {
	t.Helper()
	ctx := context.Background()
	read := func(key string) []byte {
		b, err := store.ReadAll(ctx, st, key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The text a Qwen3 chat template renders before the answer, written
	// out here rather than with the package's ChatText.
	chatTokens := func(msgs []ChatMessage) int {
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
		if msgs[len(msgs)-1].Role != "assistant" { // a prompt: the answer starts after it
			b.WriteString("<|im_start|>assistant\n")
		}
		return tok.Count(b.String())
	}
	tools, format := agents.FullInstructions()
	reported := func(m *datasets.Manifest, file string) ExportStats {
		b, _ := json.Marshal(m.Extra["stats"])
		var s Stats
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		for _, e := range s.Exports {
			if e.File == file {
				return e
			}
		}
		t.Fatalf("%s v%d: no stats for %s", m.Name, m.Version, file)
		return ExportStats{}
	}
	checkLengths := func(m *datasets.Manifest, file string, form PromptForm, lengths, examples []int, maxLen int) {
		t.Helper()
		got := reported(m, file)
		want := NewExportStats(file, got.Format, form, lengths, maxLen, got.Note)
		want.Tokenizer = TokenizerQwen3
		if examples != nil {
			want.SetExamples(examples, 2048)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: reported prompt lengths %+v\nre-tokenized %+v", file, got, want)
		}
		md := string(read(datasets.Dir(m.Name, m.Version) + "/stats.md"))
		d := want.PromptTokens
		if line := fmt.Sprintf("n %d, min %.0f, mean %.1f, p50 %.0f, p90 %.0f, max %.0f", d.N, d.Min, d.Mean, d.P50, d.P90, d.Max); !strings.Contains(md, "## Export "+file+": prompt tokens") || !strings.Contains(md, line) {
			t.Errorf("%s stats.md lacks %s's section with %q:\n%s", m.Name, file, line, md)
		}
		if over := want.OverLimit > 0; over != strings.Contains(md, "are longer than verl's data.max_prompt_length") {
			t.Errorf("%s stats.md: %d prompts over the limit, but the warning is there: %v", file, want.OverLimit, !over)
		}
	}

	// verl: training and validation files.
	rlM, err := datasets.ReadManifest(ctx, st, "rl_states", v)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, s := range rl {
		ids[s.StateID] = true
	}
	for _, f := range []struct{ file, task, split string }{{VerlTrainFile, "wine-cultivar", schemas.HeldIn}, {VerlValFile, "election-vote", schemas.HeldOut}} {
		rows := readVerlArrow(t, read(fmt.Sprintf("exports/rl_states/v%d/%s", v, f.file)))
		if len(rows) == 0 {
			t.Fatalf("%s is empty", f.file)
		}
		var lengths []int
		for i, r := range rows {
			var gt VerlGroundTruth
			if err := json.Unmarshal([]byte(r.RewardModel.GroundTruth), &gt); err != nil || !strings.HasPrefix(gt.SnapshotRef, "sha256:") {
				t.Errorf("%s row %d: ground_truth %q (%v): want JSON with the snapshot_ref", f.file, i, r.RewardModel.GroundTruth, err)
			}
			if r.DataSource != "mlerl" || r.Ability != "ml-engineering" || r.RewardModel.Style != "rule" || r.ExtraInfo.Index != int64(i) ||
				r.ExtraInfo.TaskID != f.task || r.ExtraInfo.Split != f.split || gt.TaskID != f.task {
				t.Errorf("%s row %d: %+v %+v, want task %s (%s), data_source mlerl, style rule", f.file, i, r.ExtraInfo, r.RewardModel, f.task, f.split)
			}
			// Training rows name their rl_states row; validation rows have
			// none to name (the adapter sends the snapshot_ref).
			if (f.split == schemas.HeldIn) != ids[r.ExtraInfo.StateID] {
				t.Errorf("%s row %d: state_id %q", f.file, i, r.ExtraInfo.StateID)
			}
			switch {
			case form == PromptPolicy && (len(r.Prompt) != 2 || r.Prompt[0] != (ChatMessage{Role: "system", Content: policy.SystemPrompt}) || r.Prompt[1].Role != "user" || !strings.HasPrefix(r.Prompt[1].Content, "Task: ")):
				t.Errorf("%s row %d: prompt %+v, want the policy's: mlerl's system message, the compact prompt as the user turn", f.file, i, r.Prompt)
			case form == PromptPolicy && f.split == schemas.HeldIn && !slices.ContainsFunc(rl, func(s schemas.RLState) bool {
				return s.StateID == r.ExtraInfo.StateID && s.Prompt == r.Prompt[1].Content
			}):
				t.Errorf("%s row %d: the user turn is not the compact prompt of state %s", f.file, i, r.ExtraInfo.StateID)
			case form == PromptCompact && (len(r.Prompt) != 1 || r.Prompt[0].Role != "user" || !strings.HasPrefix(r.Prompt[0].Content, "Task: ")):
				t.Errorf("%s row %d: prompt %+v, want one user message, the compact prompt", f.file, i, r.Prompt)
			case form == PromptFull && (len(r.Prompt) != 2 || r.Prompt[0].Role != "system" || !strings.Contains(r.Prompt[0].Content, "Edit Script (AI)") ||
				!strings.HasSuffix(r.Prompt[0].Content, strings.TrimSpace(format)) || r.Prompt[1].Role != "user" || !strings.HasPrefix(r.Prompt[1].Content, "Research Problem (")):
				t.Errorf("%s row %d: prompt %+v, want system (tools, format) and user (the state)", f.file, i, r.Prompt)
			}
			lengths = append(lengths, chatTokens(r.Prompt))
		}
		checkLengths(rlM, f.file, form, lengths, nil, 512)
	}

	// LLaMA-Factory: the ShareGPT lines and their registration.
	sftM, err := datasets.ReadManifest(ctx, st, "sft_examples", v)
	if err != nil {
		t.Fatal(err)
	}
	// The policy's prompt: mlerl's system message, each held-in expert
	// example's compact prompt and answer (plan variants stay out).
	sft, err := datasets.ReadAll[schemas.SFTExample](ctx, st, sftM, schemas.SFTExamples)
	if err != nil {
		t.Fatal(err)
	}
	sft = slices.DeleteFunc(sft, func(e schemas.SFTExample) bool {
		_, variant := variantSource(e.TrajectoryID)
		return e.Split != schemas.HeldIn || variant
	})
	recs := readShareGPT(t, read(fmt.Sprintf("exports/sft_examples/v%d/%s", v, ShareGPTPolicyFile)))
	if len(recs) == 0 || len(recs) != len(sft) {
		t.Fatalf("%s has %d lines, want the %d held-in expert examples", ShareGPTPolicyFile, len(recs), len(sft))
	}
	var lengths, examples []int
	for i, r := range recs {
		if r.System != policy.SystemPrompt || r.Conversations[0].Value != sft[i].Prompt || r.Conversations[1].Value != sft[i].Response || r.Tools != "" {
			t.Errorf("%s line %d: system %q\nhuman %q\ngpt %q\ntools %q\nwant policy.SystemPrompt, example %s's compact prompt and answer, no tools", ShareGPTPolicyFile, i+1, r.System, r.Conversations[0].Value, r.Conversations[1].Value, r.Tools, sft[i].ExampleID)
		}
		prompt := []ChatMessage{{Role: "system", Content: r.System}, {Role: "user", Content: r.Conversations[0].Value}}
		lengths = append(lengths, chatTokens(prompt))
		examples = append(examples, chatTokens(append(prompt, ChatMessage{Role: "assistant", Content: r.Conversations[1].Value})))
	}
	checkLengths(sftM, ShareGPTPolicyFile, PromptPolicy, lengths, examples, 0)
	// The full prompt, with the tools.
	recs = readShareGPT(t, read(fmt.Sprintf("exports/sft_examples/v%d/%s", v, ShareGPTFile)))
	if len(recs) != len(sft) {
		t.Fatalf("%s has %d lines, want %d", ShareGPTFile, len(recs), len(sft))
	}
	lengths, examples = nil, nil
	for i, r := range recs {
		if !strings.HasPrefix(r.System, strings.TrimRight(tools, "\n")) || !strings.HasSuffix(r.System, strings.TrimSpace(format)) ||
			!strings.HasPrefix(r.Conversations[0].Value, "Research Problem (wine-cultivar") || strings.Contains(r.Conversations[0].Value, "Always respond in this format") || r.Tools == "" {
			t.Errorf("sharegpt line %d: system %q\nhuman %q\nwant the instructions and tools in system, the state alone in the human turn", i+1, r.System, r.Conversations[0].Value)
		}
		prompt := []ChatMessage{{Role: "system", Content: r.System}, {Role: "user", Content: r.Conversations[0].Value}}
		lengths = append(lengths, chatTokens(prompt))
		examples = append(examples, chatTokens(append(prompt, ChatMessage{Role: "assistant", Content: r.Conversations[1].Value})))
	}
	checkLengths(sftM, ShareGPTFile, PromptFull, lengths, examples, 0) // always the full prompt
	var info map[string]LlamaFactoryDataset
	if err := json.Unmarshal(read(fmt.Sprintf("exports/sft_examples/v%d/%s", v, DatasetInfoFile)), &info); err != nil {
		t.Fatal(err)
	}
	if e := info[LlamaFactoryName]; e.FileName != ShareGPTFile || e.Formatting != "sharegpt" || e.Columns["messages"] != "conversations" || e.Columns["system"] != "system" ||
		e.Tags.UserTag != RoleHuman || e.Tags.AssistantTag != RoleGPT || info[LlamaFactoryName+"_tools"].Columns["tools"] != "tools" {
		t.Errorf("dataset_info.json = %+v, want %s (and %s_tools) over %s with the system (and tools) columns", info, LlamaFactoryName, LlamaFactoryName, ShareGPTFile)
	}
	if e := info[LlamaFactoryName+PolicySuffix]; e.FileName != ShareGPTPolicyFile || !reflect.DeepEqual(e.Columns, info[LlamaFactoryName].Columns) || e.Tags != info[LlamaFactoryName].Tags {
		t.Errorf("dataset_info.json's %s%s = %+v, want %s's columns and tags over %s", LlamaFactoryName, PolicySuffix, e, LlamaFactoryName, ShareGPTPolicyFile)
	}
}

// checkInitialStates: an initial state rendered by the dataset stage is
// the state a rollout starts from, byte for byte: the held-in task's
// trajectories 0 and 1, rendered again with the settings the steps
// manifest records, give their first steps' prompts and snapshot.
func checkInitialStates(t *testing.T, st store.Store, steps []schemas.Step) {
	t.Helper()
	ctx := context.Background()
	stepsM := mustLatest(t, st, "steps")
	rs, ok := RolloutSettingsOf(stepsM)
	if !ok || rs.Seed != 7 || rs.MaxSteps != 6 {
		t.Fatalf("rollout settings %+v (found %v), want the e2e rollout's seed 7 and 6 steps", rs, ok)
	}
	tasks, err := datasets.ReadAll[schemas.Task](ctx, st, mustLatest(t, st, "tasks"), schemas.Tasks)
	if err != nil {
		t.Fatal(err)
	}
	ideas, err := datasets.ReadAll[schemas.Idea](ctx, st, mustLatest(t, st, "ideas"), schemas.Ideas)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(tasks, func(t schemas.Task) bool { return t.TaskID == "wine-cultivar" })
	init, err := InitialStates(ctx, st, tasks[i], 2, agents.BuildPools(ideas)["wine-cultivar"], rs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range init {
		traj := strings.TrimSuffix(s.StateID, "/00")
		j := slices.IndexFunc(steps, func(x schemas.Step) bool { return x.TrajectoryID == traj && x.StepIndex == 0 })
		if j < 0 {
			t.Fatalf("no first step of %s", traj)
		}
		first := steps[j]
		if s.Prompt != first.CompactState || s.FullPrompt != first.State || s.SnapshotRef != first.SnapshotRef {
			t.Errorf("initial state %s differs from the rollout's first step:\ncompact %q\nwant    %q\nsnapshot %s, want %s", s.StateID, s.Prompt, first.CompactState, s.SnapshotRef, first.SnapshotRef)
		}
	}
}
