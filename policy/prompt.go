package policy

// EncodePrompt is mlerl's own model's prompt rule ([Policy.EncodePrompt]
// of NewMLERL(cfg, v, tok)): BOS, then the prompt's model ids, cut to
// cfg.PromptTokens by agents.RefitCompact.
func EncodePrompt(v *Vocab, tok Tokenizer, cfg Config, prompt string) ([]int32, error) {
	return NewMLERL(cfg, v, tok).EncodePrompt(prompt)
}

// EncodeResponse is mlerl's own model's response rule
// ([Policy.EncodeResponse]): the response's ids and EOS, cut to
// cfg.ResponseTokens.
func EncodeResponse(v *Vocab, tok Tokenizer, cfg Config, response string) ([]int32, error) {
	return NewMLERL(cfg, v, tok).EncodeResponse(response)
}
