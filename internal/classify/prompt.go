package classify

// promptList reads a prompt or embedding input: a string, a list of strings,
// a list of token ids or a list of lists of token ids.
func (p *bodyParser) promptList(name string) error {
	r := &p.r
	switch r.peek() {
	case 'n':
		r.skip()
		return nil
	case '"':
		n, _ := r.text()
		p.addPrompt(n, 0)
		return nil
	case '[':
	default:
		return promptTypeError(name)
	}
	r.i++
	shape := byte(0)
	i := 0
	for ; r.more(']'); i++ {
		ch := r.peek()
		if ch == '-' || ch >= '0' && ch <= '9' {
			ch = '0'
		}
		if shape == 0 {
			shape = ch
		}
		if ch != shape {
			return &Error{Param: indexed(name, i), Code: codeInvalidType,
				Message: "all elements must have the same type: strings, token ids or lists of token ids"}
		}
		switch ch {
		case '"':
			n, _ := r.text()
			p.addPrompt(n, 0)
		case '0':
			if _, err := r.tokenID(name, i); err != nil {
				return err
			}
			p.tokens = satAdd(p.tokens, 1)
		case '[':
			ids, err := p.tokenIDs(indexed(name, i))
			if err != nil {
				return err
			}
			if ids == 0 { // an empty prompt, as [] is: vLLM would refuse it after the queue
				return &Error{Param: indexed(name, i), Message: "must not be empty", Code: codeInvalidValue}
			}
			p.addPrompt(0, ids)
		default:
			return promptTypeError(indexed(name, i))
		}
	}
	if i == 0 {
		return &Error{Param: name, Message: "must not be empty", Code: codeInvalidValue}
	}
	if shape == '0' {
		p.prompts++
	}
	return nil
}

// addPrompt adds one prompt of a batch: its text is rounded up to tokens on
// its own, since vLLM runs each as a separate sequence.
func (p *bodyParser) addPrompt(textBytes, ids int64) {
	p.prompts++
	p.tokens = satAdd(p.tokens, satAdd(p.est.tokens(textBytes), ids))
}

// tokenIDs reads a list of token ids and returns its length.
func (p *bodyParser) tokenIDs(param string) (int64, error) {
	r := &p.r
	r.i++ // '['
	var n int64
	for r.more(']') {
		if _, err := r.tokenID(param, int(n)); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

func (p *bodyParser) promptEmbeds() error {
	switch p.r.peek() {
	case '"', '[':
		before := p.text
		p.generic(0, false)
		p.prompts++
		p.tokens = satAdd(p.tokens, p.est.tokens(p.text-before))
		p.text = before
		return nil
	case 'n':
		p.r.skip()
		return nil
	}
	return &Error{Param: "prompt_embeds", Code: codeInvalidType,
		Message: "must be a base64 string or a list of base64 strings"}
}

func promptTypeError(param string) error {
	return &Error{Param: param, Code: codeInvalidType,
		Message: "must be a string, a list of strings, a list of token ids or a list of lists of token ids"}
}
