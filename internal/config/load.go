package config

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
)

// maxFileBytes is the largest policy file Load accepts.
const maxFileBytes = 4 << 20

// maxErrors bounds the problems one Load reports.
const maxErrors = 50

// Load reads a policy file from r; see Parse.
func Load(r io.Reader) (*Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: read: %w", err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("config: file larger than %d bytes", maxFileBytes)
	}
	return Parse(data)
}

// LoadFile reads the policy file at path; see Parse. Errors about the
// content do not repeat the path; errors opening it do.
func LoadFile(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return Load(f)
}

// Parse decodes one YAML document, fills every key it leaves out with its
// default, derives names, and validates the result.
//
// Decoding is strict: an unknown or duplicate key, a value of the wrong type
// or a malformed duration is an error naming the key and its line. All such
// problems and all validation problems are reported at once, joined with
// errors.Join, each a *FieldError (at most 50, then a count). A YAML syntax
// error is reported alone, a *FieldError naming the line the problem is on.
// An empty document is decoded as all defaults, which does not validate (it
// has no upstreams).
func Parse(data []byte) (*Config, error) {
	c := builtin()
	errs, err := c.decode(data)
	if err != nil {
		return nil, err
	}
	c.fillDerived()
	if errs = append(errs, c.validate()...); len(errs) > 0 {
		return nil, joinCapped(errs)
	}
	return c, nil
}

// decode decodes data over c, returning every problem found, or a fatal
// error when data is not one YAML document.
func (c *Config) decode(data []byte) ([]error, error) {
	root, extra, err := documents(data)
	switch {
	case err != nil:
		return nil, syntaxError(data, err)
	case root == nil:
		c.lines = map[string]int{}
		return nil, nil // an empty file
	case extra != nil:
		return nil, &FieldError{Line: extra.Line, Msg: "more than one YAML document; a policy file holds exactly one"}
	}
	d := &decoder{lines: map[string]int{}}
	d.decode(root, reflect.ValueOf(c).Elem(), "")
	c.lines = d.lines
	return d.errs, nil
}

// joinCapped orders problems by line (those without one last) and joins at
// most maxErrors of them.
func joinCapped(errs []error) error {
	line := func(err error) int {
		if fe, ok := err.(*FieldError); ok && fe.Line > 0 {
			return fe.Line
		}
		return math.MaxInt
	}
	slices.SortStableFunc(errs, func(a, b error) int { return cmp.Compare(line(a), line(b)) })
	if len(errs) > maxErrors {
		n := len(errs) - maxErrors
		errs = append(errs[:maxErrors:maxErrors], fmt.Errorf("config: %d more problems not shown", n))
	}
	return errors.Join(errs...)
}
