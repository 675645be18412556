package tokenizer

// GPT-2's byte-level alphabet: every byte maps to a printable rune, so that
// BPE tokens are strings of visible characters. Printable Latin-1 bytes
// ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 bytes map,
// in byte order, to U+0100, U+0101, ... (space becomes 'Ġ', newline 'Ċ').
var (
	byteToRune [256]rune
	runeToByte [256 + 68]int16 // -1 where a rune is not in the alphabet
)

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	next := rune(256)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = int16(b)
	}
}

// byteLevel returns s's bytes as their byte-level runes: the form of s in
// the vocabulary ("Ġthe" for " the").
func byteLevel(s string) string {
	b := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = byteToRune[s[i]]
	}
	return string(b)
}
