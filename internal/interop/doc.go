// Package interop holds the checks that the trainers mlerl hands its data
// to read that data as mlerl means it: LLaMA-Factory (SFT on the ShareGPT
// export) and verl (RL on the verl Parquet, rewarded by `mlerl serve-env`
// through scripts/verl_reward.py). It has no code of its own, only tests,
// which run the real packages from PyPI in the virtual environment
// scripts/setup_interop.sh makes (.deps/interop) on the demo's data.
//
// `make interop` (scripts/interop.sh) installs that venv, builds the
// binary, makes the demo's data root (data-interop/, its exports counted
// with the tiny Qwen2 checkpoint's tokenizer: --export_tokenizer) and runs
// these tests with MLERL_INTEROP_DATA set, printing one line per check.
// Without the venv, or without MLERL_INTEROP_DATA, every test skips
// saying which is missing, so `make test` stays offline.
//
// What each check proves is written above its test:
//
//   - llamafactory_test.go: LLaMA-Factory's loader keeps every ShareGPT
//     row and trains on exactly the checkpoint's chat template of it
//     (TestLlamaFactoryReadsExport); llamafactory-cli trains a LoRA on the
//     unedited export, and policy/hf reads the adapter it wrote and applies
//     it as PEFT does (TestLlamaFactoryTrainsLoRA); mlerl evaluate loads
//     that adapter on its base as it is and writes an evaluation row of a
//     held-out task (TestEvaluateLlamaFactoryAdapter).
//   - verl_test.go: verl's RLHFDataset reads both Parquet files and keeps
//     exactly the rows mlerl's stats say fit a max_prompt_length
//     (TestVerlLoadsExport); verl's reward worker scores the expert's
//     actions and malformed answers through a live serve-env, with its
//     token, over TLS too, as mlerl's environment scores them
//     (TestVerlRewardThroughServeEnv); verl's trainer on this machine
//     (TestVerlTrainerOnCPU: skipped with verl's own refusal where it
//     needs a GPU).
package interop
