package classify

import "bytes"

// messages reads a chat "messages" list.
func (p *bodyParser) messages() error {
	r := &p.r
	if r.peek() != '[' {
		return &Error{Param: "messages", Message: "must be a list of message objects", Code: codeInvalidType}
	}
	r.i++
	i := 0
	for ; r.more(']'); i++ {
		if err := p.message(i); err != nil {
			return err
		}
	}
	if i == 0 {
		return &Error{Param: "messages", Message: "must not be empty", Code: codeInvalidValue}
	}
	p.hasMessages = true
	return nil
}

// message reads messages[i]: the role and content count as text, other
// fields (name, tool_calls, tool_call_id, …) generically.
func (p *bodyParser) message(i int) error {
	r := &p.r
	param := func() string { return indexed("messages", i) }
	if r.peek() != '{' {
		return &Error{Param: param(), Message: "must be an object", Code: codeInvalidType}
	}
	r.i++
	var kb [64]byte
	hasRole := false
	for r.more('}') {
		key := r.key(&kb)
		idx, fold := field(key, messageFields[:])
		switch {
		case fold != "":
			return caseError(param()+".", key, fold)
		case idx == 0:
			if r.peek() != '"' {
				return &Error{Param: param() + ".role", Message: "must be a string", Code: codeInvalidType}
			}
			n, _ := r.text()
			p.text += n
			hasRole = true
		case idx == 1:
			if err := p.content(i); err != nil {
				return err
			}
		default:
			p.generic(0, false)
		}
	}
	if !hasRole {
		return &Error{Param: param() + ".role", Message: "required", Code: codeMissing}
	}
	return nil
}

// content reads messages[i].content: a string, null or a list of parts.
func (p *bodyParser) content(i int) error {
	r := &p.r
	switch r.peek() {
	case 'n':
		r.skip()
		return nil
	case '"':
		n, _ := r.text()
		p.text += n
		return nil
	case '[':
		r.i++
		for j := 0; r.more(']'); j++ {
			if err := p.part(i, j); err != nil {
				return err
			}
		}
		return nil
	}
	return &Error{Param: indexed("messages", i) + ".content", Code: codeInvalidType,
		Message: "must be a string, null or a list of content parts"}
}

// part reads messages[i].content[j]. A text part counts its text; a part
// whose type or one of whose keys is in mediaNames counts MediaTokens (its
// URL or base64 payload is not text); other fields count generically.
func (p *bodyParser) part(i, j int) error {
	r := &p.r
	param := func() string { return indexed(indexed("messages", i)+".content", j) }
	if r.peek() != '{' {
		return &Error{Param: param(), Message: "must be an object", Code: codeInvalidType}
	}
	r.i++
	var kb [64]byte
	var tb [16]byte
	var typ []byte
	hasText, media := false, false
	for r.more('}') {
		key := r.key(&kb)
		idx, fold := field(key, partFields[:])
		switch {
		case fold != "":
			return caseError(param()+".", key, fold)
		case idx == 0:
			if r.peek() != '"' {
				return &Error{Param: param() + ".type", Message: "must be a string", Code: codeInvalidType}
			}
			typ = r.rawString()
			if bytes.IndexByte(typ, '\\') >= 0 {
				typ = appendUnquoted(tb[:0], typ)
			}
			media = media || isMedia(typ)
		case idx == 1:
			if r.peek() != '"' {
				return &Error{Param: param() + ".text", Message: "must be a string", Code: codeInvalidType}
			}
			n, _ := r.text()
			p.text += n
			hasText = true
		case isMedia(key):
			media = true
			r.skip()
		default:
			p.generic(0, false)
		}
	}
	switch {
	case media:
		p.media()
	case string(typ) == "text" && !hasText:
		return &Error{Param: param() + ".text", Message: "required", Code: codeMissing}
	}
	return nil
}

// media counts one media item.
func (p *bodyParser) media() {
	p.c.media++
	p.tokens = satAdd(p.tokens, p.est.mediaTokens)
}

func isMedia(name []byte) bool {
	for _, m := range mediaNames {
		if string(name) == m {
			return true
		}
	}
	return false
}
