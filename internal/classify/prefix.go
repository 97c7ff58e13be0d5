package classify

import "bytes"

// PromptText appends to dst the start of body's prompt as the text pod
// scoring hashes into prefix blocks (route.Blocks), at most limit bytes,
// and returns it. body must have passed Parse as a request of kind; on
// other input PromptText neither panics nor loops, but its result means
// nothing. It reads only as far into body as it needs and copies nothing
// but the text it appends: give it a dst with room for limit bytes and it
// does not allocate.
//
// The text, by kind:
//   - chat: each message in order, its role, "\n", the text of its content
//     (a string, or its text parts in order), "\n". A media part ends the
//     text: what follows depends on the media, which is not hashed.
//   - completions: the prompt string, or the first of a list of prompts;
//     a prompt of token ids as each id's 4 bytes, little-endian (a block
//     of 64 bytes is then exactly 16 tokens, vLLM's KV block).
//   - every other kind: nothing (no prefix; the pod is chosen by the other
//     scorers).
func PromptText(kind Kind, body []byte, dst []byte, limit int) []byte {
	want := ""
	switch kind {
	case KindChat:
		want = "messages"
	case KindCompletion:
		want = "prompt"
	default:
		return dst
	}
	t := prefixText{r: reader{b: body}, limit: len(dst) + limit}
	r := &t.r
	if r.peek() != '{' {
		return dst
	}
	r.i++
	var kb [64]byte
	for r.more('}') {
		if string(r.key(&kb)) != want {
			r.skip()
			continue
		}
		if kind == KindChat {
			dst = t.messages(dst)
		} else {
			dst = t.prompt(dst)
		}
		return dst[:min(len(dst), t.limit)]
	}
	return dst
}

// prefixText appends a prompt's text to a dst until it holds limit bytes.
// dst goes in and out of each method (never stored), so that the caller's
// buffer stays on its stack.
type prefixText struct {
	r     reader
	limit int
}

func (t *prefixText) full(dst []byte) bool { return len(dst) >= t.limit }

// messages reads a chat's messages until the text is full or a media part
// ends it.
func (t *prefixText) messages(dst []byte) []byte {
	r := &t.r
	if r.peek() != '[' {
		return dst
	}
	r.i++
	var kb [64]byte
	for !t.full(dst) && r.more(']') {
		if r.peek() != '{' {
			return dst
		}
		r.i++
		var role, content []byte // raw string insides; content nil when a list
		list := -1
		for r.more('}') {
			switch string(r.key(&kb)) {
			case "role":
				role = r.rawString()
				r.skip()
			case "content":
				if r.peek() == '[' {
					list = r.i
				} else {
					content = r.rawString()
				}
				r.skip()
			default:
				r.skip()
			}
		}
		dst = append(t.text(dst, role), '\n')
		ok := true
		if list >= 0 {
			if dst, ok = t.parts(dst, list); !ok {
				return dst
			}
		}
		dst = append(t.text(dst, content), '\n')
	}
	return dst
}

// parts appends the text parts of the content list at body[at]; false
// when a media part ends the prompt's text.
func (t *prefixText) parts(dst []byte, at int) ([]byte, bool) {
	r := &reader{b: t.r.b, i: at + 1}
	var kb [64]byte
	for !t.full(dst) && r.more(']') {
		if r.peek() != '{' {
			return dst, true
		}
		r.i++
		var text []byte
		media := false
		for r.more('}') {
			key := r.key(&kb)
			switch {
			case string(key) == "text":
				text = r.rawString()
				r.skip()
			case string(key) == "type":
				media = media || isMedia(r.rawString())
				r.skip()
			default:
				media = media || isMedia(key)
				r.skip()
			}
		}
		if media {
			return dst, false
		}
		dst = t.text(dst, text)
	}
	return dst, true
}

// prompt reads a completion's prompt: a string, or the first of a list of
// strings or of lists of token ids, or a list of token ids.
func (t *prefixText) prompt(dst []byte) []byte {
	r := &t.r
	switch r.peek() {
	case '"':
		return t.text(dst, r.rawString())
	case '[':
	default:
		return dst
	}
	r.i++
	switch r.peek() {
	case '"':
		return t.text(dst, r.rawString())
	case '[':
		r.i++
	}
	return t.tokenIDs(dst)
}

// tokenIDs appends each token id of a list, up to its ']', as 4 bytes.
func (t *prefixText) tokenIDs(dst []byte) []byte {
	r := &t.r
	for !t.full(dst) && r.more(']') {
		var id uint32
		for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
			id = id*10 + uint32(r.b[r.i]-'0')
			r.i++
		}
		r.skip() // anything Parse would have refused
		dst = append(dst, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return dst
}

// text appends raw, the inside of a string literal, decoded, until the
// text is full: it decodes no more of raw than fits.
func (t *prefixText) text(dst, raw []byte) []byte {
	for len(raw) > 0 && !t.full(dst) {
		j := bytes.IndexByte(raw, '\\')
		if j != 0 {
			if j < 0 {
				j = len(raw)
			}
			dst = append(dst, raw[:min(j, t.limit-len(dst))]...)
			raw = raw[j:]
			continue
		}
		k := 2
		if len(raw) > 1 && raw[1] == 'u' {
			_, k = decodeU(raw, 0)
		}
		k = min(k, len(raw))
		dst = appendUnquoted(dst, raw[:k])
		raw = raw[k:]
	}
	return dst
}
