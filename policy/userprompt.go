package policy

import (
	"fmt"

	"github.com/mlerl/mlerl/policy/hf"
)

// A prompt as a person writes it (`mlerl generate`), not a state of an
// episode: no compact prompt, no mlerl system message, no fitting to the
// training budgets. What transformers and the model's own chat template
// would give the same text is what the policy reads, so that a user can
// see a checkpoint answer as it answers elsewhere before training it.

// UserTurn encodes text as one user turn in the policy's own chat format
// followed by the assistant's generation prompt, as transformers'
// apply_chat_template([{"role": "user", "content": text}],
// add_generation_prompt=True) renders it: the template's default system
// prompt when it writes one without a system message (SmolLM2's "You are
// a helpful AI assistant named SmolLM..."), Qwen3's thinking left on as
// its template leaves it by default. mlerl's own model has no chat
// format: BOS and the text, the form it reads its prompts in.
func (p *Policy) UserTurn(text string) ([]int32, error) {
	if p.vocab != nil {
		ids, err := p.Encode(text)
		if err != nil {
			return nil, err
		}
		return append([]int32{BosID}, ids...), nil
	}
	ids, err := p.hf.EncodeChat([]hf.Message{{Role: "user", Content: text}}, true)
	if err != nil {
		return nil, err
	}
	return toInt32(ids), nil
}

// RawPrompt encodes text as it is, as transformers' tokenizer(text,
// add_special_tokens=False) does: control tokens written in the text
// ("<|im_start|>") become their ids, and nothing is added (write a BOS
// into the text where the model wants one). mlerl's own model: BOS and
// the text, as UserTurn.
func (p *Policy) RawPrompt(text string) ([]int32, error) {
	if p.vocab != nil {
		return p.UserTurn(text)
	}
	return toInt32(p.hf.Tokenizer.Encode(text)), nil
}

// FitContext sizes the policy's context for one prompt of promptLen
// tokens and maxNew new ones, before its engine is built: a Hugging Face
// policy takes what it needs up to its config.json's
// max_position_embeddings; mlerl's own model keeps the context it was
// trained with.
func (p *Policy) FitContext(promptLen, maxNew int) error {
	need := promptLen + maxNew
	if p.hf == nil {
		if need > p.Model.Ctx {
			return fmt.Errorf("the prompt's %d tokens and max_new_tokens %d make %d, past the model's context %d: shorten the prompt or lower max_new_tokens", promptLen, maxNew, need, p.Model.Ctx)
		}
		return nil
	}
	// The budgets as Config.Validate wants them: its floors, and a slot
	// for mlerl's BOS.
	prompt, response := max(promptLen, 16), max(maxNew, 2)
	ctx := 1 + prompt + response
	if limit := p.hf.Arch.MaxPositionEmbeddings; limit > 0 && ctx > limit {
		return fmt.Errorf("the prompt's %d tokens and max_new_tokens %d make %d, past config.json's max_position_embeddings %d: shorten the prompt or lower max_new_tokens", promptLen, maxNew, need, limit)
	}
	p.Model.Ctx, p.Model.PromptTokens, p.Model.ResponseTokens = ctx, prompt, response
	return nil
}

// MaxPositions is the longest sequence the policy can read: a Hugging
// Face model's max_position_embeddings (1<<20 when its config.json sets
// none), mlerl's own model's context.
func (p *Policy) MaxPositions() int {
	if p.hf == nil {
		return p.Model.Ctx
	}
	if n := p.hf.Arch.MaxPositionEmbeddings; n > 0 {
		return n
	}
	return 1 << 20
}

// toInt32 is a tokenizer's ids as model ids.
func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
