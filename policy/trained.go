package policy

import (
	"context"
	"fmt"

	"github.com/mlerl/mlerl/internal/store"
)

// Trained is a checkpoint of `mlerl train` opened for inference: the
// policy it was trained as and its weights, with what its run decided
// about the answers' form. Evaluation's trained methods (LoadAgent) and
// `mlerl generate --checkpoint` open checkpoints through it.
type Trained struct {
	// Policy is mlerl's model with the tokenizer of its SFT config's
	// `tokenizer` (found through a PPO config's `sft` folder), or the
	// Hugging Face base its policy.json names (Checkpoint.OpenPolicy).
	Policy     *Policy
	Checkpoint *Checkpoint
	// Source is the checkpoint folder's URI, with " (selected)" when it is
	// the one the run selected by its rule.
	Source string
	// Terse: the SFT run trained terse responses (Action Input on one
	// line); DashThoughts: PPO trained with free_text force.
	Terse, DashThoughts bool
}

// OpenTrained opens the checkpoint of dir, a folder of st that `mlerl
// train sft|ppo` wrote (which is CheckpointSelected or CheckpointLast),
// or dir itself when it is one step folder (step-<N>, with its
// model.json).
func OpenTrained(ctx context.Context, st store.Store, dir, which string) (*Trained, error) {
	sub, how, err := PickCheckpoint(ctx, st, dir, which)
	if err != nil {
		return nil, err
	}
	if sub == "" {
		if ok, err := store.Exists(ctx, st, dir+"/model.json"); err != nil || !ok {
			return nil, fmt.Errorf("no checkpoint in %s (run `mlerl train sft` / `mlerl train ppo` first)", st.URI(dir))
		}
		sub, how = dir, "step"
	}
	var cfg map[string]any
	ck, err := LoadCheckpoint(ctx, st, sub, &cfg, nil)
	if err != nil {
		return nil, err
	}
	tokName := ""
	if ck.Source == nil {
		if tokName, err = sftSetting(ctx, st, sub, cfg, "tokenizer"); err != nil {
			return nil, err
		}
	}
	response, _ := sftSetting(ctx, st, sub, cfg, "response")
	pol, err := ck.OpenPolicy(tokName)
	if err != nil {
		return nil, err
	}
	tr := &Trained{Policy: pol, Checkpoint: ck, Source: st.URI(sub), Terse: response == ResponseTerse, DashThoughts: cfg["FreeText"] == "force"}
	if how == "selected" {
		tr.Source += " (selected)"
	}
	return tr, nil
}

// Engine builds the named engine of the trained policy with the
// checkpoint's weights, after any change to Policy.Model (ForInference,
// FitContext).
func (t *Trained) Engine(name string) (Engine, error) {
	eng, _, err := t.Checkpoint.Engine(t.Policy, name, false)
	return eng, err
}
