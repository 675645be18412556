package tokenizer

import "unicode/utf8"

// appendLossy appends s to dst with each ill-formed UTF-8 sequence
// replaced by one U+FFFD, as Rust's String::from_utf8_lossy does (what
// Hugging Face's ByteLevel decoder returns) and Python's
// bytes.decode("utf-8", "replace"): the "maximal subpart" practice of the
// Unicode standard (§3.9, U+FFFD substitution). A truncated sequence
// ("\xe6\x97", the first two bytes of 日) is one U+FFFD, not one per byte
// as Go's []rune conversion gives; a byte that cannot start or continue
// the sequence so far starts a new one.
func appendLossy(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if _, size := utf8.DecodeRuneInString(s[i:]); size > 1 {
			dst = append(dst, s[i:i+size]...)
			i += size
			continue
		}
		i += invalidPrefix(s[i:])
		dst = append(dst, "\uFFFD"...)
	}
	return dst
}

// invalidPrefix is the length of the maximal subpart at the start of s,
// which is not a whole well-formed sequence: the lead byte and the
// continuation bytes that fit it, stopping at the first that does not.
func invalidPrefix(s string) int {
	n, lo, hi := 0, byte(0x80), byte(0xBF) // continuations needed; the first one's range
	switch c := s[0]; {
	case 0xC2 <= c && c <= 0xDF:
		n = 1
	case c == 0xE0:
		n, lo = 2, 0xA0
	case 0xE1 <= c && c <= 0xEC, c == 0xEE, c == 0xEF:
		n = 2
	case c == 0xED:
		n, hi = 2, 0x9F
	case c == 0xF0:
		n, lo = 3, 0x90
	case 0xF1 <= c && c <= 0xF3:
		n = 3
	case c == 0xF4:
		n, hi = 3, 0x8F
	}
	i := 1
	for ; i <= n && i < len(s); i++ {
		if s[i] < lo || s[i] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return i
}

// lossyString returns s unchanged when it is valid UTF-8, else with its
// ill-formed sequences replaced as [appendLossy] does.
func lossyString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(appendLossy(make([]byte, 0, len(s)+8), s))
}
