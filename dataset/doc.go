// Package dataset is the `mlerl dataset` stage: it turns the rollout
// stage's steps into what trainers consume — SFT examples, the step-wise RL
// state pool (split by task) — and exports them for other teams' tools.
//
// The stage's main flow will live in dataset.go (Run). Start there once it
// exists; export.go holds the exports: [WriteShareGPT] (LLaMA-Factory's
// ShareGPT JSON Lines, with [WriteDatasetInfo] for its dataset_info.json)
// and [WriteVerl] (verl's RL Parquet layout). Token counts come from
// internal/tokenizer.
package dataset
