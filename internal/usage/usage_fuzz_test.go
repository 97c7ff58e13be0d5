package usage

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzUsageScanner feeds any bytes, split into reads of any sizes, to the
// usage scanner with a small limit so that overlong lines and bodies occur.
// Properties: no panic; it never holds more than limit bytes; split reads give
// the same result as one read; the result is what a whole-body reading of
// the same rules gives (read by the two-pass oracle); parseUsage agrees with
// the oracle; and whatever usage parseUsage accepts, encoding/json
// reads the same (parseUsage may refuse more: duplicate keys, invalid UTF-8).
func FuzzUsageScanner(f *testing.F) {
	for _, tt := range usageCases {
		if len(tt.body) <= 4<<10 {
			f.Add([]byte(tt.body), []byte{1, 3, 7}, uint16(4095), tt.contentType == jsonType)
		}
	}
	f.Add([]byte(sseChunk("a", usageOf(3, 1))+sseChunk("bbbbbbbbbbbbbbbbbbbbbbbb", usageOf(3, 2))), []byte{5, 60}, uint16(90), false)
	f.Add([]byte(`{"usage":`+usageOf(1, 2)+`,"pad":"xxxxxxxx"}`), []byte{2}, uint16(40), true)
	f.Fuzz(func(t *testing.T, data, splits []byte, limit uint16, isJSON bool) {
		format, lim := formatSSE, 1+int(limit%4096)
		if isJSON {
			format = formatJSON
		}
		whole := scanPieces(t, format, lim, data, nil)
		split := scanPieces(t, format, lim, data, splits)
		if whole != split {
			t.Fatalf("one read gives %v, reads split by %v give %v", whole, splits, split)
		}
		if want := usageOfWhole(format, lim, data); whole != want {
			t.Fatalf("scanner gives %v, the whole-body reading %v", whole, want)
		}
		checkAgainstTwoPass(t, data)
		if u, ok := parseUsage(data); ok {
			if want, err := usageByEncodingJSON(data); err != nil || u != want {
				t.Fatalf("parseUsage(%q) = %v; encoding/json reads %v, %v", data, u, want, err)
			}
		}
	})
}

// scanPieces feeds data to a scanner in reads of the sizes in splits (1 to
// 64 each, cycling; one read if splits is empty), checking its bound after
// each.
func scanPieces(t *testing.T, format usageFormat, limit int, data, splits []byte) Tokens {
	t.Helper()
	var s scanner
	s.init(format, -1)
	s.limit = limit
	for i := 0; len(data) > 0; i++ {
		n := len(data)
		if len(splits) > 0 {
			n = min(n, 1+int(splits[i%len(splits)]%64))
		}
		s.write(data[:n])
		data = data[n:]
		if len(s.buf) > limit || cap(s.buf) > limit {
			t.Fatalf("scanner holds %d bytes (capacity %d), limit %d", len(s.buf), cap(s.buf), limit)
		}
	}
	return s.result(true)
}

// usageOfWhole applies the scanner's rules to the whole body at once, each
// document read by the two-pass oracle (usage_oracle_test.go).
func usageOfWhole(format usageFormat, limit int, data []byte) Tokens {
	if format == formatJSON {
		if len(data) > limit || !bytes.Contains(data, []byte(usageKey)) {
			return Tokens{}
		}
		u, _ := parseUsageTwoPass(data)
		return u
	}
	var last Tokens
	failed := false
	lines := bytes.Split(data, []byte("\n"))
	for _, l := range lines[:len(lines)-1] { // the last piece is unterminated
		data, isData := bytes.CutPrefix(bytes.TrimSuffix(l, []byte("\r")), []byte("data:"))
		if isData && len(l) <= limit && hasTopLevelKey(bytes.TrimPrefix(data, []byte(" ")), "error") {
			failed = true
		}
		switch {
		case len(l) > limit:
			if bytes.HasPrefix(l, []byte("data:")) {
				last = Tokens{}
			}
		case !isData || !bytes.Contains(data, []byte(usageKey)):
		default:
			if u, ok := parseUsageTwoPass(bytes.TrimPrefix(data, []byte(" "))); !ok {
				last = Tokens{}
			} else if u.Known {
				last = u
			}
		}
	}
	last.StreamError = failed
	return last
}

// usageByEncodingJSON reads a document's usage with encoding/json, keys
// matched exactly (its struct decoding would ignore case): the top-level
// usage, or when it is absent or null a top-level "response" object's.
func usageByEncodingJSON(doc []byte) (Tokens, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return Tokens{}, err
	}
	own, err := usageIn(top)
	if err != nil || own.Known {
		return own, err
	}
	raw, ok := top["response"]
	if !ok || len(raw) == 0 || raw[0] != '{' {
		return Tokens{}, nil
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(raw, &inner); err != nil {
		return Tokens{}, err
	}
	return usageIn(inner)
}

// usageIn reads obj's "usage" as parseUsage does: each count under one of
// its two names, at most once.
func usageIn(obj map[string]json.RawMessage) (Tokens, error) {
	raw, ok := obj["usage"]
	if !ok || string(raw) == "null" {
		return Tokens{}, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return Tokens{}, err
	}
	u := Tokens{Known: true}
	for _, c := range []struct {
		names [2]string
		dst   *int64
	}{{[2]string{"prompt_tokens", "input_tokens"}, &u.Prompt}, {[2]string{"completion_tokens", "output_tokens"}, &u.Completion}} {
		n := 0
		for _, name := range c.names {
			if v, ok := fields[name]; ok {
				n++
				if err := json.Unmarshal(v, c.dst); err != nil {
					return Tokens{}, err
				}
			}
		}
		if n > 1 {
			return Tokens{}, errors.New("a count under both its names")
		}
	}
	if u.Prompt < 0 || u.Completion < 0 {
		return Tokens{}, errors.New("negative count")
	}
	return u, nil
}
