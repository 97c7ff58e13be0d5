package pressure

import (
	"fmt"
	"io"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parseFamilies parses Prometheus text exposition format. UTF-8 validation
// accepts vLLM's colon names; a zero TextParser would panic.
func parseFamilies(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("pressure: parsing metrics: %w", err)
	}
	return fams, nil
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
