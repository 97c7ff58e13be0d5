package pressure

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ErrNoMetrics reports a metrics answer without any series the source reads:
// usually a URL that points at the wrong server or path.
var ErrNoMetrics = errors.New("pressure: no known metric in answer")

// parseFamilies parses the families named names out of Prometheus text
// exposition format. Lines of other families are dropped before parsing:
// a vLLM scrape is hundreds of histogram lines, of which a handful matter,
// and a malformed line elsewhere is none of our business. UTF-8 validation
// accepts vLLM's colon names; a zero TextParser would panic.
func parseFamilies(data []byte, names ...string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(keepFamilies(data, names)))
	if err != nil {
		return nil, fmt.Errorf("pressure: parsing metrics: %w", err)
	}
	// The line filter judges a name by its legal characters; the parser also
	// reads quoted (UTF-8) names, so a kept line can still name another
	// family (`name"00" 1` is family name00): keep only what was asked for.
	for n := range fams {
		if !slices.Contains(names, n) {
			delete(fams, n)
		}
	}
	return fams, nil
}

// keepFamilies returns the lines of data that belong to the named families:
// their samples and their HELP and TYPE comments.
func keepFamilies(data []byte, names []string) []byte {
	out := make([]byte, 0, 1024)
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		if !wanted(familyOf(line), names) {
			continue
		}
		out = append(out, line...)
		if line[len(line)-1] != '\n' {
			out = append(out, '\n')
		}
	}
	return out
}

func wanted(name []byte, names []string) bool {
	for _, n := range names {
		if string(name) == n { // no allocation
			return true
		}
	}
	return false
}

// familyOf returns the metric name a text-format line is about, or nil for
// blank lines and other comments.
func familyOf(line []byte) []byte {
	line = bytes.TrimLeft(line, " \t")
	if rest, ok := bytes.CutPrefix(line, []byte("#")); ok {
		rest = bytes.TrimLeft(rest, " \t")
		kw, rest, ok := bytes.Cut(rest, []byte(" "))
		if !ok || (string(kw) != "HELP" && string(kw) != "TYPE") {
			return nil
		}
		line = bytes.TrimLeft(rest, " \t")
	}
	// The name ends where its legal characters end, as the parser sees it:
	// "name{", "name 1", even "name+Inf".
	i := 0
	for i < len(line) && isNameByte(line[i], i) {
		i++
	}
	return line[:i]
}

// isNameByte reports whether c may stand at position i of a metric name
// ([a-zA-Z_:][a-zA-Z0-9_:]*).
func isNameByte(c byte, i int) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':' ||
		(i > 0 && c >= '0' && c <= '9')
}

// sampleValue returns a gauge, counter or untyped sample's value, and false
// for other types and for NaN or infinite values.
func sampleValue(m *dto.Metric) (float64, bool) {
	var v float64
	switch {
	case m.Gauge != nil:
		v = m.Gauge.GetValue()
	case m.Counter != nil:
		v = m.Counter.GetValue()
	case m.Untyped != nil:
		v = m.Untyped.GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// label returns the value of the first of names that m carries.
func label(m *dto.Metric, names ...string) string {
	for _, n := range names {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == n {
				return lp.GetValue()
			}
		}
	}
	return ""
}

// aggregate folds every valid sample of the family named name: the maximum
// when max is true, else the sum. ok is false when there is no valid sample.
func aggregate(fams map[string]*dto.MetricFamily, name string, max bool) (v float64, ok bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		x, good := sampleValue(m)
		if !good {
			continue
		}
		switch {
		case !ok:
			v = x
		case max:
			v = math.Max(v, x)
		default:
			v += x
		}
		ok = true
	}
	return v, ok
}
