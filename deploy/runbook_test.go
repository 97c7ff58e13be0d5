package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestRunbookURLs: every alert carries a runbook_url into
// docs/operations.md whose anchor is that page's heading for the alert,
// and the page has no runbook entry for an alert that does not exist.
func TestRunbookURLs(t *testing.T) {
	b, err := os.ReadFile("prometheus/gatekeeper-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (Gatekeeper\w+)$`).FindAllStringSubmatch(string(page), -1) {
		headings[strings.ToLower(m[1])] = true
	}
	const prefix = "https://github.com/gatekeeper-dev/gatekeeper/blob/main/docs/operations.md#"
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			anchor := strings.ToLower(r.Alert)
			alerts[anchor] = true
			if got := r.Annotations["runbook_url"]; got != prefix+anchor {
				t.Errorf("%s: runbook_url = %q, want %q", r.Alert, got, prefix+anchor)
			}
			if !headings[anchor] {
				t.Errorf("%s: docs/operations.md has no \"### %s\" runbook entry", r.Alert, r.Alert)
			}
		}
	}
	for h := range headings {
		if !alerts[h] {
			t.Errorf("docs/operations.md has a runbook entry %q for no alert", h)
		}
	}
}
