package control

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/pressure"
)

// docs/signals.md is generated from the code: package pressure's signals
// (their doc comments and Info, which pressure's TestSignalInfo proves
// against its parsers), the signals a policy rule may name and their
// default rules (package config, the thresholds each accepts probed from
// its loader) and the built-in rule SlowSettings adds. TestSignalsReference
// fails when the page drifts; -update-signals rewrites it:
//
//	go test ./internal/control -run TestSignalsReference -update-signals
var updateSignals = flag.Bool("update-signals", false, "rewrite docs/signals.md")

const signalsPath = "../../docs/signals.md"

// bare is a policy that leaves every rule at its default.
const bare = "upstreams: [{url: \"http://a:8000\"}]\n"

// constDocs returns the doc comment of each string constant in file, by
// value, without its leading "Name is ".
func constDocs(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			doc := vs.Doc
			if doc == nil && len(gd.Specs) == 1 {
				doc = gd.Doc
			}
			if len(vs.Values) != 1 || doc == nil {
				continue
			}
			lit, ok := vs.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			text := strings.Join(strings.Fields(doc.Text()), " ")
			out[v] = strings.TrimPrefix(text, vs.Names[0].Name+" is ")
		}
	}
	return out
}

// thresholds probes the loader for the degrade values a rule on sig
// accepts: "> 0", "> 1", "> 0, ≤ 1".
func thresholds(t *testing.T, sig config.Signal) string {
	t.Helper()
	accepts := func(v float64) bool {
		_, err := config.Parse(fmt.Appendf(nil, "%spressure: {rules: {%s: {degrade: %v}}}\n", bare, sig, v))
		return err == nil
	}
	var parts []string
	switch {
	case accepts(0):
		parts = append(parts, "≥ 0")
	case accepts(0.001):
		parts = append(parts, "> 0")
	case accepts(1.001) && !accepts(1):
		parts = append(parts, "> 1")
	default:
		t.Fatalf("no lower bound found for a %s rule", sig)
	}
	if !accepts(1e12) {
		if accepts(1) && !accepts(1.001) {
			parts = append(parts, "≤ 1")
		} else {
			parts = append(parts, "bounded")
		}
	}
	return strings.Join(parts, ", ")
}

// ruleText writes r as the policy file would: {degrade: 1.2, shed: 1.5, for: 2s}.
func ruleText(r config.Rule) string {
	dur := func(d time.Duration) string {
		if d%time.Second == 0 {
			return strconv.FormatInt(int64(d/time.Second), 10) + "s"
		}
		return d.String()
	}
	var parts []string
	if r.Degrade != nil {
		parts = append(parts, "degrade: "+strconv.FormatFloat(*r.Degrade, 'g', -1, 64))
	}
	if r.Shed != nil {
		parts = append(parts, "shed: "+strconv.FormatFloat(*r.Shed, 'g', -1, 64))
	}
	if r.Horizon > 0 {
		parts = append(parts, "horizon: "+dur(r.Horizon))
	}
	if r.For > 0 {
		parts = append(parts, "for: "+dur(r.For))
	}
	return "`{" + strings.Join(parts, ", ") + "}`"
}

func generateSignalsDoc(t *testing.T) []byte {
	t.Helper()
	cfg, err := config.Parse([]byte(bare))
	if err != nil {
		t.Fatal(err)
	}
	meaning := constDocs(t, "../pressure/signal.go")
	builtIn := constDocs(t, "settings.go")[PodOverload]
	ruled := map[pressure.Signal]config.Signal{}
	for _, s := range config.Signals() {
		ps, ok := pressure.ParseSignal(string(s))
		if !ok {
			t.Fatalf("config signal %q is not a pressure signal", s)
		}
		ruled[ps] = s
	}
	var b bytes.Buffer
	b.WriteString(`# Pressure signals

Every signal gatekeeper reads: what its value counts, where it comes from,
and the rule it gets when the policy names none. Generated from the code
(package pressure's signals and what each source kind yields, the rule
signals and default rules of package config, the built-in rule of package
control) by ` + "`go test ./internal/control -run TestSignalsReference -update-signals`" + `;
a test fails when this page drifts.

- A rule (` + "`pressure.rules.<signal>`" + `, or ` + "`upstreams[].rules.<signal>`" + ` for one pod; its
  keys are in [configuration.md](configuration.md#pressure)) may name a signal
  whose *Thresholds* are given; its ` + "`degrade`" + ` and ` + "`shed`" + ` must lie in them.
- A rule written in the file replaces that signal's default rule whole, and
  ` + "`{}`" + ` or ` + "`null`" + ` removes it: ` + "`fragmentation: {degrade: 1.3}`" + ` has no ` + "`shed`" + ` and
  no ` + "`for`" + `.
- *Per GPU*: a node-level source's GPUs belong to the upstreams whose ` + "`gpus`" + `
  list them; an upstream on several GPUs takes its worst. [sources.md](sources.md)
  says how each source kind reads its signals.
- A signal no source yields is absent, never zero: its rule does nothing.

| Signal | Unit | Read per | Sources | Thresholds | Default rule | Meaning |
|---|---|---|---|---|---|---|
`)
	for _, s := range pressure.Signals() {
		info := s.Info()
		per := "upstream"
		if info.PerGPU {
			per = "GPU"
		}
		kinds := make([]string, len(info.Kinds))
		for i, k := range info.Kinds {
			kinds[i] = "`" + string(k) + "`"
		}
		valid, rule := "—", "not a rule signal"
		if cs, ok := ruled[s]; ok {
			valid, rule = thresholds(t, cs), "none"
			if r, ok := cfg.Pressure.Rules[cs]; ok {
				rule = ruleText(r)
			}
		}
		text := meaning[string(s)]
		if info.Rate {
			text += " Derived from successive readings: absent until the source's second."
		}
		if text == "" {
			t.Fatalf("pressure.%s has no doc comment", s)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", s, info.Unit, per, strings.Join(kinds, ", "), valid, rule, text)
	}
	rules := SlowSettings(cfg, cfg.Upstreams[0]).Level.Rules
	i := slices.IndexFunc(rules, func(r breaker.Rule) bool { return r.Signal == PodOverload })
	if i < 0 || builtIn == "" {
		t.Fatalf("SlowSettings adds no %s rule, or it has no doc comment", PodOverload)
	}
	fmt.Fprintf(&b, "| `%s` | answers | upstream | gatekeeper's count of the pod's own answers | — | `{degrade: %v}`, built in: not in the policy | %s |\n",
		PodOverload, rules[i].Degrade, builtIn)
	return b.Bytes()
}

// TestSignalsReference: docs/signals.md is what the code generates.
func TestSignalsReference(t *testing.T) {
	got := generateSignalsDoc(t)
	if *updateSignals {
		if err := os.WriteFile(signalsPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(signalsPath)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s differs from the code (err %v); run: go test ./internal/control -run TestSignalsReference -update-signals", signalsPath, err)
	}
}
