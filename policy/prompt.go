package policy

import (
	"fmt"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/textutil"
)

// EncodePrompt is the one prompt-fitting rule of the policy, used by SFT,
// PPO (sampling and the loss) and evaluation alike, so that a state
// always reads as the same tokens: BOS, then the prompt's model ids, cut
// to cfg.PromptTokens by agents.RefitCompact (the oldest history lines
// first, then the script's last lines, with a visible marker; the task
// header, the scores, the plan and the answer instruction are always
// kept). A prompt that cannot be made to fit (the header alone is too
// long, or the text is not a compact prompt) is an error naming it.
func EncodePrompt(v *Vocab, tok Tokenizer, cfg Config, prompt string) ([]int32, error) {
	var ids []int32
	var encErr error
	fits := func(s string) bool {
		ids, encErr = v.Encode(tok, s)
		return encErr == nil && len(ids) <= cfg.PromptTokens
	}
	text, ok := agents.RefitCompact(prompt, fits)
	if encErr != nil {
		return nil, encErr
	}
	if !ok {
		return nil, fmt.Errorf("policy: the prompt %q... does not fit in model.prompt_tokens %d even without its history and script (raise model.prompt_tokens and model.ctx)", textutil.Clip(prompt, 60), cfg.PromptTokens)
	}
	if text != prompt || len(ids) == 0 {
		// fits ran last on a longer candidate during the search: encode the
		// chosen text again.
		if ids, encErr = v.Encode(tok, text); encErr != nil {
			return nil, encErr
		}
	}
	return append([]int32{BosID}, ids...), nil
}

// EncodeResponse encodes a response and its EOS, cut to
// cfg.ResponseTokens (a cut response loses its end and its EOS).
func EncodeResponse(v *Vocab, tok Tokenizer, cfg Config, response string) ([]int32, error) {
	ids, err := v.Encode(tok, response)
	if err != nil {
		return nil, err
	}
	ids = append(ids, EosID)
	if len(ids) > cfg.ResponseTokens {
		ids = ids[:cfg.ResponseTokens]
	}
	return ids, nil
}
