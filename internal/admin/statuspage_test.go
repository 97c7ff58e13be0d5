package admin

import (
	"bytes"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestStatusPageRoutes(t *testing.T) {
	t.Parallel()
	h := StatusPage()
	tests := []struct {
		name, method, path string
		status             int
		contentType        string // prefix
		location           string
		body               string // substring
		csp                bool
	}{
		{name: "redirect", method: "GET", path: "/admin", status: 301, location: "/admin/"},
		{name: "index", method: "GET", path: "/admin/", status: 200, contentType: "text/html", body: `src="app.js"`, csp: true},
		{name: "index by name", method: "GET", path: "/admin/index.html", status: 301, location: "./"},
		{name: "script", method: "GET", path: "/admin/app.js", status: 200, contentType: "text/javascript", body: "function poll", csp: true},
		{name: "style", method: "GET", path: "/admin/style.css", status: 200, contentType: "text/css", csp: true},
		{name: "icon", method: "GET", path: "/admin/favicon.svg", status: 200, contentType: "image/svg+xml", csp: true},
		{name: "head", method: "HEAD", path: "/admin/", status: 200, contentType: "text/html", csp: true},
		{name: "unknown asset", method: "GET", path: "/admin/nope.js", status: 404},
		{name: "no subfolders", method: "GET", path: "/admin/ui/app.js", status: 404},
		{name: "no traversal", method: "GET", path: "/admin/../main.go", status: 404},
		{name: "post", method: "POST", path: "/admin/", status: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.status {
				t.Fatalf("%s %s = %d, want %d", tt.method, tt.path, rec.Code, tt.status)
			}
			if got := rec.Header().Get("Content-Type"); !strings.HasPrefix(got, tt.contentType) {
				t.Errorf("Content-Type = %q, want %q", got, tt.contentType)
			}
			if got := rec.Header().Get("Location"); got != tt.location {
				t.Errorf("Location = %q, want %q", got, tt.location)
			}
			if !strings.Contains(rec.Body.String(), tt.body) {
				t.Errorf("body lacks %q", tt.body)
			}
			if got := rec.Header().Get("Content-Security-Policy"); tt.csp && got != statusPageCSP {
				t.Errorf("Content-Security-Policy = %q, want %q", got, statusPageCSP)
			}
		})
	}
}

// TestStatusPageCSP checks that the policy forbids inline code and remote
// loads, and that the page needs neither.
func TestStatusPageCSP(t *testing.T) {
	t.Parallel()
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(statusPageCSP, want) {
			t.Errorf("CSP %q lacks %q", statusPageCSP, want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(statusPageCSP, bad) {
			t.Errorf("CSP %q allows %q", statusPageCSP, bad)
		}
	}
	tests := []struct {
		file string
		bad  *regexp.Regexp
		why  string
	}{
		{"ui/index.html", regexp.MustCompile(`<script[^>]*>[^<]+</script>`), "an inline script"},
		{"ui/index.html", regexp.MustCompile(`<style|\sstyle=|\son[a-z]+=`), "an inline style or handler"},
		{"ui/index.html", regexp.MustCompile(`(?i)(?:src|href)="(?:https?:)?//`), "a remote load"},
		{"ui/app.js", regexp.MustCompile(`https?://|innerHTML|eval\(|new Function|console\.`), "a remote URL, innerHTML, eval or console output"},
		{"ui/style.css", regexp.MustCompile(`@import|url\(`), "an import or remote url"},
	}
	for _, tt := range tests {
		b, err := uiFiles.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		if m := tt.bad.Find(b); m != nil {
			t.Errorf("%s has %s: %q", tt.file, tt.why, m)
		}
	}
	index, _ := uiFiles.ReadFile("ui/index.html")
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAll(index, -1) {
		if !bytes.Contains(tag, []byte(` src="`)) {
			t.Errorf("ui/index.html has a script without src: %q", tag)
		}
	}
}
