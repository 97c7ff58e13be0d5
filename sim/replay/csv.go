package replay

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Source yields a trace's arrivals in time order. Trace and CSVTrace are the
// two implementations.
type Source interface {
	// Next returns the next arrival, or false at the end (or on an error,
	// which Err then returns).
	Next() (Arrival, bool)
	// Err returns the error that ended the source early, or nil.
	Err() error
	// Classes names the classes that Arrival.Class indexes.
	Classes() []string
}

// Err returns nil: a synthetic trace cannot fail.
func (tr *Trace) Err() error { return nil }

// Classes returns the names of the trace's classes.
func (tr *Trace) Classes() []string {
	names := make([]string, len(tr.s.Classes))
	for i, c := range tr.s.Classes {
		names[i] = c.Name
	}
	return names
}

// CSVTrace reads arrivals from CSV rows
//
//	arrival_seconds,prompt_tokens,output_tokens[,max_tokens]
//
// with arrival times non-decreasing, token counts ≥ 1 and max_tokens (default
// output_tokens) ≥ output_tokens. A first row whose first field is not a
// number is a header and skipped; blank lines and lines starting with # are
// ignored. Requests with a prompt of at least LongPrompt tokens are class 1
// ("long"), the others class 0 ("short"). Create one with NewCSVTrace. Not
// safe for concurrent use.
type CSVTrace struct {
	r          *csv.Reader
	longPrompt int
	last       time.Duration
	rows       int
	err        error
}

// NewCSVTrace reads from r; longPrompt ≤ 0 means 1000 tokens.
func NewCSVTrace(r io.Reader, longPrompt int) *CSVTrace {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	if longPrompt <= 0 {
		longPrompt = 1000
	}
	return &CSVTrace{r: cr, longPrompt: longPrompt}
}

// Classes returns "short" and "long".
func (c *CSVTrace) Classes() []string { return []string{"short", "long"} }

// Err returns the first malformed row's error (with its line), or nil.
func (c *CSVTrace) Err() error { return c.err }

// Next returns the next row's arrival.
func (c *CSVTrace) Next() (Arrival, bool) {
	for c.err == nil {
		rec, err := c.r.Read()
		if errors.Is(err, io.EOF) {
			return Arrival{}, false
		}
		if err != nil {
			c.err = fmt.Errorf("replay: trace: %w", err) // csv.ParseError names the line
			break
		}
		line, _ := c.r.FieldPos(0)
		c.rows++
		if c.rows == 1 && len(rec) > 0 {
			if _, err := strconv.ParseFloat(strings.TrimSpace(rec[0]), 64); err != nil {
				continue // header
			}
		}
		a, err := c.parse(rec)
		if err != nil {
			c.err = fmt.Errorf("replay: trace line %d: %w", line, err)
			break
		}
		return a, true
	}
	return Arrival{}, false
}

func (c *CSVTrace) parse(rec []string) (Arrival, error) {
	if len(rec) < 3 || len(rec) > 4 {
		return Arrival{}, fmt.Errorf("%d fields, want arrival_seconds,prompt_tokens,output_tokens[,max_tokens]", len(rec))
	}
	sec, err := strconv.ParseFloat(strings.TrimSpace(rec[0]), 64)
	if err != nil || math.IsNaN(sec) || sec < 0 || sec > 1e9 {
		return Arrival{}, fmt.Errorf("arrival_seconds %q: want a number of seconds in [0, 1e9]", rec[0])
	}
	at := time.Duration(sec * float64(time.Second))
	if at < c.last {
		return Arrival{}, fmt.Errorf("arrival %v before the previous row's %v", at, c.last)
	}
	var n [3]int
	for i := 1; i < len(rec); i++ {
		v, err := strconv.Atoi(strings.TrimSpace(rec[i]))
		if err != nil || v < 1 || v > 10_000_000 {
			return Arrival{}, fmt.Errorf("field %d %q: want a token count in [1, 1e7]", i+1, rec[i])
		}
		n[i-1] = v
	}
	if n[2] == 0 {
		n[2] = n[1]
	}
	if n[2] < n[1] {
		return Arrival{}, fmt.Errorf("max_tokens %d below output_tokens %d", n[2], n[1])
	}
	c.last = at
	a := Arrival{At: at, Prompt: n[0], Output: n[1], MaxToken: n[2]}
	if a.Prompt >= c.longPrompt {
		a.Class = 1
	}
	return a, nil
}
