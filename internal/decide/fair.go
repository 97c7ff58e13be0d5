package decide

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
)

// Fairness shares the queue between tenants within a priority (the
// queue's Virtual Token Counter). Immutable once in a Policy.
type Fairness struct {
	// TenantHeader names the header whose value is the tenant; "" means the
	// client key (Policy.ClientKeyHeader's value).
	TenantHeader string
	// InputWeight and OutputWeight weigh prompt and generated tokens in the
	// service counted to a tenant. 0 means 1 and 2.
	InputWeight, OutputWeight float64
	// Tenants names some tenants and gives them a weight, by "sha256:<hex>"
	// of the tenant value; the rest weigh 1.
	Tenants map[string]Tenant
}

// Tenant is one named tenant.
type Tenant struct {
	Name   string
	Weight float64 // 0 or less counts as 1
}

// unnamedPrefix starts the queue key of a tenant Fairness does not name:
// a prefix of its value's SHA-256, so that no API key reaches the queue,
// /admin/state or a log (64 bits: a collision between two live tenants is
// out of reach of any bounded tenant set).
const unnamedPrefix = "sha256:"

// unnamedTenant reports whether a queue tenant key stands for a tenant the
// policy does not name (metrics count those as one "other").
func unnamedTenant(key string) bool {
	return len(key) > len(unnamedPrefix) && key[:len(unnamedPrefix)] == unnamedPrefix
}

// tenant is req's tenant key and weight; "" and 0 without fairness or
// without a tenant value.
func (f *Fairness) tenant(h Headers, clientKey string) (string, float64) {
	if f == nil {
		return "", 0
	}
	v := clientKey
	if f.TenantHeader != "" {
		v = h.Get(f.TenantHeader)
	}
	if v == "" {
		return "", 1
	}
	sum := sha256.Sum256([]byte(v))
	full := unnamedPrefix + hex.EncodeToString(sum[:])
	if t, ok := f.Tenants[full]; ok {
		return t.Name, max(t.Weight, 0)
	}
	return full[:len(unnamedPrefix)+16], 1
}

// service is the weighted tokens of prompt and output tokens.
func (f *Fairness) service(prompt, output int64) int64 {
	if f == nil {
		return 0
	}
	s := f.inputWeight()*float64(max(prompt, 0)) + f.outputWeight()*float64(max(output, 0))
	if s >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(math.Ceil(s))
}

func (f *Fairness) inputWeight() float64 {
	if f.InputWeight > 0 {
		return f.InputWeight
	}
	return 1
}

func (f *Fairness) outputWeight() float64 {
	if f.OutputWeight > 0 {
		return f.OutputWeight
	}
	return 2
}

// mulSat is a × b for a, b ≥ 0, saturating at math.MaxInt64.
func mulSat(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
