package main

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestMarkdownLinks: every relative link in the repository's Markdown
// pages leads to a file of the repository, and every #fragment to a heading
// (or an explicit anchor) of the page it names, as GitHub renders them.
// CONTRIBUTING.md linked a style guide the repository does not hold and a
// stub page (issue 35, item 13).
func TestMarkdownLinks(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pages := markdownPages(t, root)
	if len(pages) < 10 {
		t.Fatalf("found %d Markdown pages under %s, want the repository's", len(pages), root)
	}
	anchors := map[string]map[string]bool{} // page → its anchors, read once
	relative := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, l := range markdownLinks(string(b)) {
			if !isURL(l.target) {
				relative++
			}
			if err := checkLink(root, page, l.target, anchors); err != "" {
				t.Errorf("%s:%d: link %q: %s", rel, l.line, l.target, err)
			}
		}
	}
	if relative < 50 {
		t.Errorf("checked %d relative links, want the repository's (more than 50)", relative)
	}
}

// isURL reports whether a link target is a URL (https:, mailto:, //host).
func isURL(target string) bool { return urlScheme.MatchString(target) }

// markdownPages are the .md files under root, outside hidden folders and
// node_modules (installed, not ours).
func markdownPages(t *testing.T, root string) []string {
	t.Helper()
	var pages []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// A link found in a page.
type mdLink struct {
	line   int
	target string
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	heading    = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	mdLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	urlScheme  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:|^//`)
)

// markdownLinks lists the link targets of a page, inline ([text](target),
// images too) and reference definitions ([ref]: target), outside code.
func markdownLinks(text string) []mdLink {
	var links []mdLink
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, mdLink{i + 1, m[1]})
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			links = append(links, mdLink{i + 1, m[1]})
		}
	}
	return links
}

// checkLink says what is wrong with target, a link in page, or "".
func checkLink(root, page, target string, anchors map[string]map[string]bool) string {
	if isURL(target) {
		return "" // a URL (https:, mailto:): not ours to check offline
	}
	p, frag, _ := strings.Cut(target, "#")
	p, err := url.PathUnescape(p)
	if err != nil {
		return err.Error()
	}
	dest := page
	switch {
	case p == "":
	case strings.HasPrefix(p, "/"):
		dest = filepath.Join(root, filepath.FromSlash(p)) // GitHub: from the repository's root
	default:
		dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(p))
	}
	if rel, err := filepath.Rel(root, dest); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "leads outside the repository"
	}
	info, err := os.Stat(dest)
	if err != nil {
		return "no such file or folder"
	}
	if frag == "" || info.IsDir() || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	if anchors[dest] == nil {
		b, err := os.ReadFile(dest)
		if err != nil {
			return err.Error()
		}
		anchors[dest] = pageAnchors(string(b))
	}
	if !anchors[dest][frag] {
		return "no heading or anchor #" + frag + " in " + filepath.Base(dest)
	}
	return ""
}

// pageAnchors are the fragments a page answers to on GitHub: each
// heading's slug (a repeated one with -1, -2, …) and each <a id> or
// <a name>.
func pageAnchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// slug is GitHub's anchor for a heading: the text of its links, lower
// case, letters, digits, spaces, hyphens and underscores kept, spaces
// turned into hyphens.
func slug(h string) string {
	h = mdLinkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestSlug pins slug on headings of this repository's shapes.
func TestSlug(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"Packages and seams", "packages-and-seams"},
		{"Issue 35, item 13 (part one)", "issue-35-item-13-part-one"},
		{"`gatekeeper probe`: one read", "gatekeeper-probe-one-read"},
		{"What the [runbook](#runbook) says", "what-the-runbook-says"},
		{"queue_full and no_memory", "queue_full-and-no_memory"},
		{"Why **these** defaults?", "why-these-defaults"},
	} {
		if got := slug(tt.in); got != tt.want {
			t.Errorf("slug(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
