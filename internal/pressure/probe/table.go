package probe

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
)

// writeTable writes r for a person: a line naming the source, then one row
// per value (SIGNAL, GPU, VALUE; "-" for a pod-level value), then a note
// when some value is a counter.
func (r Result) writeTable(w io.Writer) error {
	head := string(r.kind)
	if r.url != "" {
		head += " " + r.url
	}
	if r.guessed {
		head += " (kind guessed from the answer; -kind sets it)"
	}
	if _, err := fmt.Fprintf(w, "%s\n\n", head); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SIGNAL\tGPU\tVALUE")
	counters := false
	for _, row := range r.Rows {
		gpu := row.gpu
		switch {
		case gpu == "":
			gpu = "-"
		case row.uuid != "":
			gpu += " (" + row.uuid + ")"
		}
		value := formatValue(row.Value)
		if row.counter {
			value += " (counter)"
			counters = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", row.Signal, gpu, value)
	}
	if len(r.Rows) == 0 {
		fmt.Fprintln(tw, "(no value)\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if counters {
		_, err := fmt.Fprintln(w, "\n(counter): a running total; gatekeeper turns two readings into the per-second rate of that name.")
		return err
	}
	return nil
}

// formatValue writes v in full, without an exponent in the ranges signals
// take (fractions, counts, bytes).
func formatValue(v float64) string {
	if a := math.Abs(v); v == 0 || a >= 1e-4 && a < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
