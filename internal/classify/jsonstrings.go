package classify

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// scanString validates the string literal whose opening quote is at b[i] and
// returns the index after its closing quote and whether it holds escapes.
func scanString(b []byte, i int) (end int, escaped bool, err error) {
	start := i
	i++
	for i < len(b) {
		if i+8 <= len(b) {
			m := specialBits(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8
				continue
			}
			// Straight to the first special byte: the lowest bit set is
			// never a false positive.
			i += bits.TrailingZeros64(m) >> 3
		}
		ch := b[i]
		if plainStringByte[ch] {
			i++
			continue
		}
		switch {
		case ch == '"':
			return i + 1, escaped, nil
		case ch == '\\':
			escaped = true
			n, err := scanEscape(b, i)
			if err != nil {
				return i, true, err
			}
			i = n
		case ch < 0x20:
			return i, escaped, syntaxError(i, "control character in a string; escape it")
		case ch < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return i, escaped, &Error{Code: codeInvalidJSON,
					Message: "invalid UTF-8 at byte " + strconv.Itoa(i)}
			}
			i += size
		}
	}
	return i, escaped, syntaxError(start, "unterminated string")
}

// plainStringByte marks the bytes that stand for themselves inside a string:
// printable ASCII but the quote and the backslash.
var plainStringByte = func() (t [256]bool) {
	for ch := 0x20; ch < utf8.RuneSelf; ch++ {
		t[ch] = ch != '"' && ch != '\\'
	}
	return t
}()

// specialBits marks, by its high bit, each of the eight bytes in x (little
// endian: b[i] is the lowest byte) that is not a plainStringByte: a word at a
// time, since ASCII text is most of a body. A byte is special when it is
// below 0x20 or from 0x80 (one test: x-0x20 borrows, or x has its high bit)
// or equal to '"' or '\\' (x^c is zero); the high bits are masked once, at
// the end. A borrow can mark a plain byte too, but only one above a special
// byte, so the lowest bit set is always the first special byte.
func specialBits(x uint64) uint64 {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	q, bs := x^'"'*lsb, x^'\\'*lsb
	return (x - 0x20*lsb | x | (q-lsb)&^q | (bs-lsb)&^bs) & msb
}

// scanEscape validates the escape sequence at b[i] == '\\' and returns the
// index after it. A \u escape of a high surrogate must be followed by one of
// a low surrogate.
func scanEscape(b []byte, i int) (int, error) {
	if i+1 >= len(b) {
		return i, syntaxError(i, "unterminated string")
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2, nil
	case 'u':
		r, ok := hex4(b, i+2)
		if !ok {
			return i, syntaxError(i, `invalid \u escape`)
		}
		switch {
		case r >= 0xDC00 && r < 0xE000:
			return i, syntaxError(i, "lone low surrogate in a \\u escape")
		case r >= 0xD800 && r < 0xDC00:
			lo, ok := uint32(0), i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u'
			if ok {
				lo, ok = hex4(b, i+8)
			}
			if !ok || lo < 0xDC00 || lo >= 0xE000 {
				return i, syntaxError(i, "lone high surrogate in a \\u escape")
			}
			return i + 12, nil
		}
		return i + 6, nil
	default:
		return i, syntaxError(i, "invalid escape character")
	}
}

func hex4(b []byte, i int) (uint32, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r uint32
	for _, ch := range b[i : i+4] {
		switch {
		case ch >= '0' && ch <= '9':
			ch -= '0'
		case ch >= 'a' && ch <= 'f':
			ch -= 'a' - 10
		case ch >= 'A' && ch <= 'F':
			ch -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | uint32(ch)
	}
	return r, true
}

// appendUnquoted appends the decoded form of raw, the inside of a string
// literal that scanString accepted.
func appendUnquoted(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		ch := raw[i]
		if ch != '\\' || i+1 >= len(raw) {
			dst = append(dst, ch)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, n := decodeU(raw, i)
			dst = utf8.AppendRune(dst, r)
			i += n
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst
}

// decodeU decodes the \u escape (or surrogate pair) at raw[i] and returns the
// rune and the bytes consumed. Invalid input decodes to U+FFFD.
func decodeU(raw []byte, i int) (rune, int) {
	r, ok := hex4(raw, i+2)
	if !ok {
		return utf8.RuneError, 2
	}
	if r >= 0xD800 && r < 0xDC00 && i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
		if lo, ok := hex4(raw, i+8); ok && lo >= 0xDC00 && lo < 0xE000 {
			return rune((r-0xD800)<<10|(lo-0xDC00)) + 0x10000, 12
		}
	}
	if r >= 0xD800 && r < 0xE000 {
		return utf8.RuneError, 6
	}
	return rune(r), 6
}
