// Package dataset is the `mlerl dataset` stage: it turns the rollout
// stage's steps into what trainers consume — SFT examples and the
// step-wise RL state pool, split by task — exports them for other teams'
// tools, and shares dataset versions between data roots.
//
// Start with [Run] (dataset.go), which reads top to bottom: read the steps
// and the tasks they were rolled out on, count tokens with the Qwen
// tokenizer (internal/tokenizer), build the examples ([BuildSFT], sft.go,
// from the steps and the [PlanVariants] of the expert's edits, variants.go)
// and the state pool ([BuildRLStates], rlstates.go), check for leaks
// ([CheckNoLeak]), then write each dataset with its statistics report
// ([ComputeStats], stats.go: stats.md beside the version, JSON in the
// manifest) and its exports (export.go: [WriteShareGPT] with
// [WriteDatasetInfo] for LLaMA-Factory, [WriteVerl] for verl, with the
// held-out tasks' states of [BuildValStates], valstates.go, as verl's
// validation file). [Publish] (publish.go) copies a committed version to
// another root.
//
// # Splits: where held-out tasks may appear
//
// The split is the task's (tasks dataset), never a row's: every row of a
// task carries that task's split. Held-out tasks are evaluation tasks;
// by default the rollout stage does not even roll them out. When the
// steps do contain them (rollout split=all):
//
//   - sft_examples may hold them, labelled split=held-out, only while
//     held_out_validation is on (the default): the SFT trainer reads
//     held-out rows as its validation set and never trains on them.
//     Turn it off to keep evaluation tasks out of every dataset.
//   - rl_states never holds them: the RL trainer samples start states
//     from the pool, so the pool is held-in only.
//   - the training exports (ShareGPT, verl_train.parquet) never hold
//     them: they are training files for tools that do not know our split
//     column.
//   - verl_val.parquet holds only them: verl's validation file (its
//     data.val_files). A held-out task the rollout visited gives its
//     expert states; one it did not (the default rollout) gives initial
//     states, rendered and snapshotted by this stage exactly as a rollout
//     starts (val_per_task of them, one per sampled plan).
//
// [CheckNoLeak] enforces this before anything is written, and the
// writers of the exports refuse held-out rows themselves ([ErrHeldOut]),
// the validation file held-in ones ([ErrHeldIn]).
//
// # Prompts in the exports
//
// The exports hand a trainer the prompt mlerl gives a Hugging Face
// policy (prompt form policy, [PromptPolicy]): mlerl's system message
// (policy.SystemPrompt) and the compact prompt as the user turn, the
// messages policy.PromptMessages returns, so that the trainer's chat
// template renders the tokens the policy reads when mlerl evaluates or
// fine-tunes it (`--policy hf:DIR --adapter DIR`). verl's file carries it
// by default (verl_prompt: policy); verl_prompt: compact drops the
// system message (a template then adds its default one), verl_prompt:
// full gives the MLAgentBench prompt (4-8k tokens) as a system message
// (role, tool list, answer format) and a user message (the state). The
// SFT examples go out twice: sharegpt_policy.jsonl with the policy's
// prompt (dataset_info.json's mlerl_sft_policy) and sharegpt.jsonl with
// the full prompt so split and the tools also as JSON (mlerl_sft,
// mlerl_sft_tools). A change to what the exports write bumps
// exportFormat, part of the run key, so a rerun never finds a version
// whose exports differ from what the code writes.
// stats.md reports each export's prompt token lengths (and the ShareGPT
// examples' whole lengths, prompt and answer) as a chat template counts
// them: Qwen3's by default ([QwenChat]), or the model's own with
// export_tokenizer ([CheckpointChat]; a small or foreign vocabulary
// counts very differently). The stage warns when verl prompts exceed
// verl_max_prompt_length (verl drops them) and when ShareGPT examples
// exceed sharegpt_cutoff_len (LLaMA-Factory's cutoff_len, which cuts the
// end of a prompt without a word).
//
// # Layout in a data root
//
//	sft_examples/v<N>/part-00000.parquet, stats.md, _MANIFEST.json
//	rl_states/v<N>/part-00000.parquet, stats.md, _MANIFEST.json
//	exports/sft_examples/v<N>/sharegpt_policy.jsonl, sharegpt.jsonl, dataset_info.json
//	exports/rl_states/v<N>/verl_train.parquet, verl_val.parquet
//
// Each manifest lists stats.md and the exports with their sha256 under
// Extra["attachments"], the stats under Extra["stats"] (the exports'
// prompt lengths under "exports"), the task ids per split under
// Extra["tasks"], the exports' locations (and, for rl_states, the
// validation file's snapshots, which Publish copies) under
// Extra["exports"], and its parents (steps, tasks, ideas, and the
// trajectories of the same rollout).
package dataset
