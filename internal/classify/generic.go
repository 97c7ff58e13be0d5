package classify

// generic counts any value: the bytes of its strings, one token per number;
// booleans and nulls count nothing. A data: URL, and the value of a key in
// mediaNames, count MediaTokens instead. With keys set (tool schemas) the
// bytes of object keys count too and no key means media. depth guards
// against input that skipped CheckJSON.
func (p *bodyParser) generic(depth int, keys bool) {
	r := &p.r
	switch ch := r.peek(); ch {
	case '"':
		n, data := r.text()
		if data {
			p.media()
			return
		}
		p.text = satAdd(p.text, n)
	case '{', '[':
		if depth >= maxJSONDepth {
			r.skip()
			return
		}
		closer := byte(']')
		if ch == '{' {
			closer = '}'
		}
		r.i++
		var kb [64]byte
		for r.more(closer) {
			if ch == '{' {
				k := r.key(&kb)
				switch {
				case keys:
					p.text = satAdd(p.text, int64(len(k)))
				case isMedia(k):
					p.media()
					r.skip()
					continue
				}
			}
			p.generic(depth+1, keys)
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		r.skip()
		p.tokens = satAdd(p.tokens, 1)
	default:
		r.skip()
	}
}
