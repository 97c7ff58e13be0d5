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
	t := prefixText{r: reader{b: body}, dst: dst, limit: len(dst) + limit}
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
			t.messages()
		} else {
			t.prompt()
		}
		return t.dst[:min(len(t.dst), t.limit)]
	}
	return dst
}

// prefixText appends a prompt's text to dst until it holds limit bytes.
type prefixText struct {
	r     reader
	dst   []byte
	limit int
}

func (t *prefixText) full() bool { return len(t.dst) >= t.limit }

// messages reads a chat's messages until the text is full or a media part
// ends it.
func (t *prefixText) messages() {
	r := &t.r
	if r.peek() != '[' {
		return
	}
	r.i++
	var kb [64]byte
	for !t.full() && r.more(']') {
		if r.peek() != '{' {
			return
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
		t.text(role)
		t.dst = append(t.dst, '\n')
		if list >= 0 && !t.parts(list) {
			return
		}
		t.text(content)
		t.dst = append(t.dst, '\n')
	}
}

// parts appends the text parts of the content list at body[at]; false
// when a media part ends the prompt's text.
func (t *prefixText) parts(at int) bool {
	r := &reader{b: t.r.b, i: at + 1}
	var kb [64]byte
	for !t.full() && r.more(']') {
		if r.peek() != '{' {
			return true
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
			return false
		}
		t.text(text)
	}
	return true
}

// prompt reads a completion's prompt: a string, or the first of a list of
// strings or of lists of token ids, or a list of token ids.
func (t *prefixText) prompt() {
	r := &t.r
	switch r.peek() {
	case '"':
		t.text(r.rawString())
		return
	case '[':
	default:
		return
	}
	r.i++
	switch r.peek() {
	case '"':
		t.text(r.rawString())
	case '[':
		r.i++
		t.tokenIDs()
	default:
		t.tokenIDs()
	}
}

// tokenIDs appends each token id of a list, up to its ']', as 4 bytes.
func (t *prefixText) tokenIDs() {
	r := &t.r
	for !t.full() && r.more(']') {
		var id uint32
		for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
			id = id*10 + uint32(r.b[r.i]-'0')
			r.i++
		}
		r.skip() // anything Parse would have refused
		t.dst = append(t.dst, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
}

// text appends raw, the inside of a string literal, decoded, until the
// text is full: it decodes no more of raw than fits.
func (t *prefixText) text(raw []byte) {
	for len(raw) > 0 && !t.full() {
		j := bytes.IndexByte(raw, '\\')
		if j != 0 {
			if j < 0 {
				j = len(raw)
			}
			t.dst = append(t.dst, raw[:min(j, t.limit-len(t.dst))]...)
			raw = raw[j:]
			continue
		}
		k := 2
		if len(raw) > 1 && raw[1] == 'u' {
			_, k = decodeU(raw, 0)
		}
		k = min(k, len(raw))
		t.dst = appendUnquoted(t.dst, raw[:k])
		raw = raw[k:]
	}
}
