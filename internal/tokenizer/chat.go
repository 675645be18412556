package tokenizer

import "strings"

// Message is one turn of a chat.
type Message struct {
	Role    string `json:"role"` // system, user or assistant
	Content string `json:"content"`
}

// FormatChat renders messages in Qwen's ChatML:
//
//	<|im_start|>system
//	You are...<|im_end|>
//	<|im_start|>user
//	...<|im_end|>
//
// each message followed by a newline. With generationPrompt it ends with
// "<|im_start|>assistant\n", where the model's answer starts. It is the
// plain ChatML of Qwen2.5; Qwen3's template additionally wraps the last
// assistant turn in <think></think>, which mlerl does not use.
func FormatChat(messages []Message, generationPrompt bool) string {
	var b strings.Builder
	for _, m := range messages {
		b.WriteString(IMStart)
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteString(IMEnd)
		b.WriteByte('\n')
	}
	if generationPrompt {
		b.WriteString(IMStart + "assistant\n")
	}
	return b.String()
}

// EncodeChat returns the ids of messages in ChatML. The ChatML markers
// become their control ids; the messages' contents are encoded with
// [Tokenizer.EncodeOrdinary], so text that merely contains "<|im_end|>"
// cannot end a turn.
func (t *Tokenizer) EncodeChat(messages []Message, generationPrompt bool) []int {
	start, end := t.ids[IMStart], t.ids[IMEnd]
	nl := t.EncodeOrdinary("\n")
	var ids []int
	for _, m := range messages {
		ids = append(ids, start)
		ids = t.appendOrdinary(ids, m.Role+"\n"+m.Content)
		ids = append(ids, end)
		ids = append(ids, nl...)
	}
	if generationPrompt {
		ids = append(ids, start)
		ids = t.appendOrdinary(ids, "assistant\n")
	}
	return ids
}
