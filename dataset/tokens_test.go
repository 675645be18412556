package dataset

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy/hf"
)

// tinyQwen2 is the tiny random Qwen2 checkpoint policy/hf's tests commit:
// a 640-id byte-level BPE with Qwen2.5's chat template (its default
// system prompt included).
func tinyQwen2(t *testing.T) *hf.Checkpoint {
	t.Helper()
	c, err := hf.Load(filepath.Join(repoRoot(), "policy", "hf", "testdata", "ckpt", "qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// goldenExports are the export rows whose lengths were measured by the
// trainers themselves (transformers 5.5.4, llamafactory 0.9.5, verl 0.9.1
// in scripts/setup_interop.sh's venv, 2026-12-05; LLaMA-Factory read the
// policy's prompt through dataset_info.json's mlerl_sft_policy) on the
// tiny Qwen2 checkpoint: the ShareGPT records of sftRows with the first
// one's full prompt as the renderer writes it, in the full and the
// policy's prompt form, and rlRows' first state in every prompt form.
func goldenExports(t *testing.T, count ChatCounter) (sharegpt map[PromptForm]*ShareGPTWriter, verl map[PromptForm]*VerlWriter) {
	t.Helper()
	rows := sftRows()
	rows[0].FullPrompt = renderedFull("Research Problem (digits): improve accuracy.\nStep 1:\nAction: List Files")
	sharegpt = map[PromptForm]*ShareGPTWriter{}
	for _, form := range []PromptForm{PromptFull, PromptPolicy} {
		opts := DefaultShareGPTOptions()
		opts.Prompt, opts.Count = form, count
		sw := NewShareGPTWriter(io.Discard, opts)
		if err := sw.Write(rows...); err != nil {
			t.Fatal(err)
		}
		sharegpt[form] = sw
	}
	st := rlRows()[:1]
	st[0].FullPrompt = renderedFull("Research Problem (digits): improve accuracy.\nStep 2:")
	verl = map[PromptForm]*VerlWriter{}
	for _, form := range []PromptForm{PromptCompact, PromptFull, PromptPolicy} {
		o := DefaultVerlOptions()
		o.Prompt, o.Count = form, count
		vw := NewVerlWriter(io.Discard, o)
		if err := vw.Write(st...); err != nil {
			t.Fatal(err)
		}
		verl[form] = vw
	}
	return sharegpt, verl
}

// TestCheckpointChatMatchesTrainers: with export_tokenizer set to a
// checkpoint, the exports' token counts are the trainers' own for that
// checkpoint. The wanted numbers were written down from running them:
//
//   - verl: len(tokenizer.apply_chat_template(row["prompt"],
//     add_generation_prompt=True, tokenize=True)), what RLHFDataset's
//     filter_overlong_prompts compares with data.max_prompt_length;
//   - LLaMA-Factory: len(input_ids) of each example its sft loader made
//     from the export through dataset_info.json (template qwen), the
//     sequence cutoff_len limits.
//
// Qwen3's counter (the default) is far off on this vocabulary: the
// reason export_tokenizer exists.
func TestCheckpointChatMatchesTrainers(t *testing.T) {
	sw, vw := goldenExports(t, CheckpointChat(tinyQwen2(t)))
	checks := []struct {
		name      string
		got, want []int
	}{
		{"verl compact prompt (the template's default system prompt added)", vw[PromptCompact].PromptTokens(), []int{71}},
		{"verl full prompt", vw[PromptFull].PromptTokens(), []int{1342}},
		{"verl policy prompt (mlerl's system message instead of the default one)", vw[PromptPolicy].PromptTokens(), []int{91}},
		{"sharegpt prompts", sw[PromptFull].PromptTokens(), []int{1352, 107}},
		{"sharegpt whole examples, as LLaMA-Factory tokenizes them", sw[PromptFull].ExampleTokens(), []int{1397, 153}},
		{"sharegpt policy prompts", sw[PromptPolicy].PromptTokens(), []int{102, 109}},
		{"sharegpt policy whole examples, as LLaMA-Factory tokenizes them", sw[PromptPolicy].ExampleTokens(), []int{147, 155}},
	}
	for _, c := range checks {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: got %v want %v", c.name, c.got, c.want)
		}
	}
	qsw, _ := goldenExports(t, QwenChat(func(s string) int { return len(strings.Fields(s)) }))
	if slices.Equal(qsw[PromptFull].PromptTokens(), sw[PromptFull].PromptTokens()) {
		t.Errorf("the default counter gives the checkpoint's counts %v: the check above proves nothing", sw[PromptFull].PromptTokens())
	}
}

// TestShareGPTCutoff: whole examples longer than LLaMA-Factory's
// cutoff_len are reported with the length to set, in the warning and
// stats.md; within it, stats.md says they fit.
func TestShareGPTCutoff(t *testing.T) {
	sw, _ := goldenExports(t, CheckpointChat(tinyQwen2(t)))
	for _, c := range []struct {
		name   string
		cutoff int
		over   int
		want   string
	}{
		{"one over", 1024, 1, "1 of 2 examples of sharegpt.jsonl are longer than LLaMA-Factory's cutoff_len 1024 tokens (longest 1397, prompt and answer): it cuts the end of their prompts without a warning; set cutoff_len to 1397 or more"},
		{"all fit", 2048, 0, "Every example fits LLaMA-Factory's cutoff_len 2048."},
		{"no check", 0, 0, "n 2, min 153, mean 775.0, p50 153, p90 1397, max 1397"},
	} {
		t.Run(c.name, func(t *testing.T) {
			es := NewExportStats(ShareGPTFile, "sharegpt", PromptFull, sw[PromptFull].PromptTokens(), 0, "the held-in examples")
			es.Tokenizer = "ckpt/qwen2"
			es.SetExamples(sw[PromptFull].ExampleTokens(), c.cutoff)
			if es.OverCutoff != c.over {
				t.Errorf("over cutoff: got %d want %d", es.OverCutoff, c.over)
			}
			if w := es.Warning(); (w != "") != (c.over > 0) || !strings.Contains(w, c.want) && c.over > 0 {
				t.Errorf("warning %q, want one with %q: %v", w, c.want, c.over > 0)
			}
			var md strings.Builder
			writeExport(&md, es)
			if !strings.Contains(md.String(), c.want) || !strings.Contains(md.String(), "those of the checkpoint ckpt/qwen2") {
				t.Errorf("stats.md section lacks %q or the tokenizer:\n%s", c.want, md.String())
			}
		})
	}
}

// TestExportTokenizer: the stage counts the exports' tokens with the
// export_tokenizer checkpoint and says so in the stats; a folder that is
// no checkpoint is refused naming the key, before anything is written.
func TestExportTokenizer(t *testing.T) {
	ctx := context.Background()
	t.Run("checkpoint", func(t *testing.T) {
		f := newFixture(t)
		cfg := testRunConfig(f.root)
		cfg.ExportTokenizer = filepath.Join(repoRoot(), "policy", "hf", "testdata", "ckpt", "qwen2")
		if err := run(ctx, cfg, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
		m, err := datasets.ReadManifest(ctx, f.st, "rl_states", 1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(m.Extra["stats"])
		var s Stats
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		count := CheckpointChat(tinyQwen2(t))
		data, err := store.ReadAll(ctx, f.st, "exports/rl_states/v1/"+VerlTrainFile)
		if err != nil {
			t.Fatal(err)
		}
		longest := 0
		for _, r := range readVerlArrow(t, data) {
			n, err := count(r.Prompt, true)
			if err != nil {
				t.Fatal(err)
			}
			longest = max(longest, n)
		}
		if len(s.Exports) == 0 || s.Exports[0].File != VerlTrainFile || s.Exports[0].Tokenizer != cfg.ExportTokenizer || s.Exports[0].PromptTokens.Max != float64(longest) {
			t.Errorf("rl_states stats.exports %+v, want %s counted by %s, longest %d", s.Exports, VerlTrainFile, cfg.ExportTokenizer, longest)
		}
	})
	t.Run("not a checkpoint", func(t *testing.T) {
		f := newFixture(t)
		cfg := testRunConfig(f.root)
		cfg.ExportTokenizer = t.TempDir()
		err := run(ctx, cfg, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "dataset: export_tokenizer: ") || !strings.Contains(err.Error(), "config.json is missing") {
			t.Fatalf("got %v, want an error naming export_tokenizer and the missing config.json", err)
		}
		if ms, _ := datasets.List(ctx, f.st); slices.ContainsFunc(ms, func(m *datasets.Manifest) bool { return m.Name == "rl_states" || m.Name == "sft_examples" }) {
			t.Errorf("a dataset was written before the refusal")
		}
	})
}
