package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// findChromium returns Debian's chromium, or skips (fails under
// GATEKEEPER_REQUIRE_TOOLS=1, as in CI, which installs it).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "chromium not found: run scripts/install/chromium.sh (Debian's chromium) to test the status page in a browser"
	if os.Getenv("GATEKEEPER_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// runChromium loads url in headless Chromium, lets the page run for eight
// seconds of virtual time (its timers advance, network waits pause the
// clock), and returns the DOM and Chromium's log, which carries every
// console message (pageConsole reads them). The screenshot goes to shot.
func runChromium(t *testing.T, chromium, url, shot string) (dom, logs string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-dev-shm-usage", "--no-default-browser-check",
		"--user-data-dir="+t.TempDir(), "--enable-logging=stderr", "--v=0",
		"--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1280,1200",
		"--virtual-time-budget=8000", "--dump-dom", "--screenshot="+shot, url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// consoleEntry is one console message in Chromium's log
// (--enable-logging=stderr), where it reads
//
//	[pid:tid:MMDD/HHMMSS.micros:INFO:CONSOLE:line] "text", source: URL (line)
//
// (older Chromium: CONSOLE(line)), the text possibly over several lines.
type consoleEntry struct {
	text    string // the entry as logged, all its lines
	message string // between the quotes; the whole text when !parsed
	source  string // the URL of the script or document that logged it
	parsed  bool   // false: a console line in a shape this file does not know
}

var (
	chromiumLogLine = regexp.MustCompile(`^\[\d+:\d+:\d{4}/\d{6}\.\d+:`)
	consoleFirst    = regexp.MustCompile(`^\[\d+:\d+:\d{4}/\d{6}\.\d+:[A-Z]+:CONSOLE(?::\d+|\(\d+\))\] "`)
	consoleLast     = regexp.MustCompile(`", source: (\S*) \(\d+\)$`)
)

// parseConsole returns the console entries in a Chromium log, in order. A
// line that mentions CONSOLE in a shape it does not know becomes an entry
// with parsed false, so that a change of Chromium's format shows up as
// messages rather than as silence.
func parseConsole(log string) []consoleEntry {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	var entries []consoleEntry
	for i := 0; i < len(lines); i++ {
		first := consoleFirst.FindStringIndex(lines[i])
		if first == nil {
			if strings.Contains(lines[i], ":CONSOLE") {
				entries = append(entries, consoleEntry{text: lines[i], message: lines[i]})
			}
			continue
		}
		// The entry ends at the first line with its source, before the
		// next line of the log.
		end := -1
		for j := i; j < len(lines) && (j == i || !chromiumLogLine.MatchString(lines[j])); j++ {
			if consoleLast.MatchString(lines[j]) {
				end = j
				break
			}
		}
		if end < 0 {
			entries = append(entries, consoleEntry{text: lines[i], message: lines[i]})
			continue
		}
		text := strings.Join(lines[i:end+1], "\n")
		last := consoleLast.FindStringSubmatchIndex(text)
		entries = append(entries, consoleEntry{
			text:    text,
			message: text[first[1]:last[0]],
			source:  text[last[2]:last[3]],
			parsed:  true,
		})
		i = end
	}
	return entries
}

// pageConsole returns the console entries in a Chromium log that the page
// at pageURL wrote: those whose source (the script or document that logged
// them) has the page's origin, and those it cannot read. Chromium's own
// pages log too, to the same log: under load, "Slow network is detected …
// Fallback font will be used while loading: chrome://resources/…" from a
// chrome:// page the page under test never loads (issue 35). Those, and
// entries without a source, are not the page's.
func pageConsole(log, pageURL string) (page, others []consoleEntry) {
	for _, e := range parseConsole(log) {
		if !e.parsed || sameOrigin(e.source, pageURL) {
			page = append(page, e)
		} else {
			others = append(others, e)
		}
	}
	return page, others
}

// sameOrigin reports whether two absolute URLs have the same scheme, host
// and port.
func sameOrigin(a, b string) bool {
	ua, err := url.Parse(a)
	if err != nil || ua.Host == "" {
		return false
	}
	ub, err := url.Parse(b)
	if err != nil || ub.Host == "" {
		return false
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host)
}

func TestPageConsole(t *testing.T) {
	// A log recorded from Chromium 156 (Debian): the noise of a busy machine
	// (Chromium's own composebox page warning about its font, the line that
	// failed TestStatusPageInChromium in issue 35), and the shapes a page's
	// own messages take (console.log, a console.error over two lines, an
	// uncaught error), recorded from a page served on loopback and moved to
	// the origin below.
	recorded, err := os.ReadFile(filepath.Join("testdata", "chromium-console.log"))
	if err != nil {
		t.Fatal(err)
	}
	const page = "http://127.0.0.1:40001/admin/"
	const at = "[9870:9870:1206/124321.852875:INFO:CONSOLE:2] "
	tests := []struct {
		name       string
		log        string
		wantPage   []string // messages, or the whole line of an unreadable entry
		wantOthers []string
	}{
		{
			name:       "recorded",
			log:        string(recorded),
			wantPage:   []string{"hello from the page", "a message\nover two lines", "Uncaught Error: uncaught in a timer"},
			wantOthers: []string{"Slow network is detected. See https://www.chromestatus.com/feature/5636954674692096 for more details. Fallback font will be used while loading: chrome://resources/roboto/roboto-regular.woff2"},
		},
		{
			name:     "older format, CONSOLE(line)",
			log:      `[1:1:1206/124321.852875:INFO:CONSOLE(7)] "old", source: http://127.0.0.1:40001/admin/app.js (7)`,
			wantPage: []string{"old"},
		},
		{
			name:       "another port is another origin",
			log:        at + `"elsewhere", source: http://127.0.0.1:40002/app.js (1)`,
			wantOthers: []string{"elsewhere"},
		},
		{
			name:       "no source",
			log:        at + `"from nowhere", source:  (0)`,
			wantOthers: []string{"from nowhere"},
		},
		{
			name:       "an extension",
			log:        at + `"hi", source: chrome-extension://abc/x.js (3)`,
			wantOthers: []string{"hi"},
		},
		{
			name:     "cut off by the next log line: unreadable, reported",
			log:      at + "\"never ends\n[9870:9870:1206/124321.9:INFO:x.cc:1] next",
			wantPage: []string{at + `"never ends`},
		},
		{
			name:     "an unknown shape: reported",
			log:      `[9870:9870:1206/124321.9:VERBOSE1:CONSOLE] "new shape" from http://127.0.0.1:40001/admin/`,
			wantPage: []string{`[9870:9870:1206/124321.9:VERBOSE1:CONSOLE] "new shape" from http://127.0.0.1:40001/admin/`},
		},
		{
			name: "no console at all",
			log:  "[9870:9904:1206/124321.073427:ERROR:dbus/bus.cc:405] Failed to connect to the bus\n",
		},
	}
	messages := func(es []consoleEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.message)
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotPage, gotOthers := pageConsole(tt.log, page)
			if got := messages(gotPage); !slices.Equal(got, tt.wantPage) {
				t.Errorf("pageConsole() page = %q, want %q", got, tt.wantPage)
			}
			if got := messages(gotOthers); !slices.Equal(got, tt.wantOthers) {
				t.Errorf("pageConsole() others = %q, want %q", got, tt.wantOthers)
			}
		})
	}
}
