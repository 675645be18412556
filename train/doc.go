// Package train is the trainer stage: `mlerl train sft`, then `mlerl
// train ppo`. It reads the dataset stage's outputs and writes policy
// checkpoints (policy.Checkpoint) with their metrics.jsonl.
//
// Where to read it, top to bottom:
//
//   - stage.go: what SFT and PPO share around their loops: validate, open
//     the store, read the input split by task, resume the latest
//     checkpoint, build the engine, save, record metrics, stop on a signal.
//   - sft.go: RunSFT. Examples are encoded with policy.EncodePrompt's one
//     fitting rule (the prompt as PPO and evaluation see it), responses
//     made terse by default (response.go), packed into rows of ctx tokens
//     (pack.go), and trained with the masked cross-entropy of loss.go.
//   - ppo.go: RunPPOWith, step-wise PPO in the paper's order: sample
//     expert states, generate group_size actions for each (constrained
//     decoding by default, the same masks used again for the ratio; one
//     prefill per state), collect rewards asynchronously (collector.go)
//     from sandboxed execution (envreward.go: the agentic-ML reward of
//     env with undo and final-answer credit, pending edits settled),
//     leave-one-out group advantages (or the critic's), duration-aware
//     weights floored so none is 0, minibatch epochs of the clipped loss
//     over decision tokens with KL to the SFT policy (loss.go), metrics,
//     learning-curve points (curve.go) and checkpoints. ppo_run.go holds
//     the steps (packing each prompt once with its actions), async.go the
//     asynchronous collector of the duration-aware paper, episodes.go the
//     episode-wise baseline (mode episode).
//
// Which model trains is the `policy` key: mlerl's own (trained from
// scratch) or a Hugging Face folder or GGUF file (hf:DIR or gguf:FILE,
// fine-tuned with LoRA by default); both stages ask the policy.Policy for everything model-
// specific, so the loops above are the same for both. The model and its
// engines live in policy/ (the native CPU engine in policy/native, GoMLX
// for XLA); this package only drives them.
package train
