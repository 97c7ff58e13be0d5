package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// firstScreen is how many lines a newcomer sees before scrolling.
const firstScreen = 40

// TestReadme holds README.md to what a newcomer's page promises: at most
// 250 lines; exactly two set-up commands in its first shell block, the
// demo on the embedded default (a bare go run: the default build needs no
// cgo) and the test suite, the second being what .ci/run runs; both on the
// first screen, with where to go next (the docs index), and no features
// list pushing them down (issue 35, item 13); and every docs/ page it names
// exists.
func TestReadme(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if n := strings.Count(text, "\n"); n > 250 {
		t.Errorf("README.md has %d lines, want at most 250", n)
	}
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(text)
	if block == nil {
		t.Fatal("README.md has no sh block")
	}
	var cmds []string
	for _, l := range strings.Split(strings.TrimSpace(block[1]), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) != 2 || !strings.Contains(cmds[0], "go run ./cmd/gatekeeper -demo") || cmds[1] != "./scripts/test.sh" {
		t.Fatalf("README.md's first sh block = %q, want the demo and ./scripts/test.sh", cmds)
	}
	if !strings.HasPrefix(cmds[0], "go run ") {
		t.Errorf("README.md's demo command = %q, want a bare go run: the default build needs no cgo setting", cmds[0])
	}
	lines := strings.Split(text, "\n")
	screen := strings.Join(lines[:min(firstScreen, len(lines))], "\n")
	if !strings.Contains(screen, block[0]) {
		t.Errorf("README.md's two commands end past line %d: a newcomer must see them without scrolling", firstScreen)
	}
	if !strings.Contains(screen, "](docs/README.md)") {
		t.Errorf("README.md's first %d lines do not link docs/README.md: say where to go next", firstScreen)
	}
	if i, j := strings.Index(text, "\n## Features"), strings.Index(text, block[0]); i >= 0 && i < j {
		t.Errorf("README.md lists its features before the two commands")
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ci), "exec ./scripts/test.sh") {
		t.Error(".ci/run does not run ./scripts/test.sh, the README's test command")
	}
	for _, m := range regexp.MustCompile(`docs/[a-z.]+\.(md|json)`).FindAllString(text, -1) {
		if _, err := os.Stat(filepath.Join("../..", m)); err != nil {
			t.Errorf("README.md names %s: %v", m, err)
		}
	}
}

// TestReadmeBoxes: in the diagrams of README.md and docs/, every line of a
// box drawn with box-drawing characters has its left and right borders in
// the columns of the box's corners, counted in display width, not bytes
// (issue 35, item 13: two lines of README's box were one column off).
func TestReadmeBoxes(t *testing.T) {
	t.Parallel()
	pages, _ := filepath.Glob("../../docs/*.md")
	pages = append(pages, "../../README.md")
	boxes := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(page, "../../")
		n, problems := checkBoxes(string(b))
		boxes += n
		for _, p := range problems {
			t.Errorf("%s:%s", name, p)
		}
	}
	if boxes < 2 {
		t.Errorf("found %d boxes in README.md and docs/, want README's diagram and design.md's", boxes)
	}
}

// checkBoxes finds the boxes in text's fenced blocks (a ┌ and the first ┐
// after it on its line) and follows each down: while a line has a left
// border (│ ├ ┼) under the ┌, it must have a right border (│ ┤ ┼) under the
// ┐; a └ under the ┌ closes the box and must meet a ┘. A box whose border
// ends in anything else is left open (arrows leaving it). It returns how
// many boxes it found and a line for each misplaced border.
func checkBoxes(text string) (int, []string) {
	lines := strings.Split(text, "\n")
	var problems []string
	boxes, inFence := 0, false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if !inFence {
			continue
		}
		cells := displayCells(line)
		for left, r := range cells {
			if r != '┌' {
				continue
			}
			right := slices.Index(cells[left+1:], '┐')
			if right < 0 {
				continue
			}
			right += left + 1
			boxes++
			for j := i + 1; j < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[j]), "```"); j++ {
				row := displayCells(lines[j])
				at := func(col int) rune {
					if col < len(row) {
						return row[col]
					}
					return ' '
				}
				l, r := at(left), at(right)
				if !strings.ContainsRune("│├┼└", l) {
					break // the box is open below: arrows leave it
				}
				want := "│┤┼"
				if l == '└' {
					want = "┘"
				}
				if !strings.ContainsRune(want, r) {
					problems = append(problems, fmt.Sprintf("%d: the box opened on line %d has %q at display column %d, want its right border (%s); the line's borders are at %v",
						j+1, i+1, r, right+1, want, borderColumns(row)))
				}
				if l == '└' {
					break
				}
			}
		}
	}
	return boxes, problems
}

// borderColumns lists the display columns (1-based) of row's vertical
// borders, for the failure message.
func borderColumns(row []rune) []int {
	var cols []int
	for c, r := range row {
		if strings.ContainsRune("│├┤┼┐┘┌└", r) {
			cols = append(cols, c+1)
		}
	}
	return cols
}

// displayCells lays line out in terminal cells: one rune per cell, a wide
// rune (CJK, most emoji) followed by a 0 for its second cell, and
// zero-width runes (combining marks, joiners, variation selectors) dropped.
func displayCells(line string) []rune {
	var cells []rune
	for _, r := range line {
		switch {
		case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf) || unicode.Is(unicode.Variation_Selector, r):
		case wide(r):
			cells = append(cells, r, 0)
		default:
			cells = append(cells, r)
		}
	}
	return cells
}

// wide reports whether r takes two terminal cells (East Asian Wide and
// Fullwidth, in the blocks a diagram could meet).
func wide(r rune) bool {
	for _, w := range [][2]rune{
		{0x1100, 0x115F}, {0x2E80, 0x303E}, {0x3041, 0x33FF}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF},
		{0xA000, 0xA4CF}, {0xAC00, 0xD7A3}, {0xF900, 0xFAFF}, {0xFE30, 0xFE4F}, {0xFF00, 0xFF60},
		{0xFFE0, 0xFFE6}, {0x1F300, 0x1F64F}, {0x1F900, 0x1F9FF}, {0x20000, 0x3FFFD},
	} {
		if w[0] <= r && r <= w[1] {
			return true
		}
	}
	return false
}

// TestCheckBoxes pins checkBoxes and its display width on small diagrams.
func TestCheckBoxes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		diagram  string
		problems []string // each problem's start
	}{
		{name: "aligned", diagram: "┌──┐\n│ab│\n└──┘"},
		{name: "right border one column late", diagram: "┌──┐\n│abc│\n│ab│\n└──┘", problems: []string{"3: the box opened on line 2 has 'c' at display column 4"}},
		{name: "bottom one column short", diagram: "┌──┐\n│ab│\n└─┘", problems: []string{"4: the box opened on line 2 has ' ' at display column 4"}},
		{name: "wide runes take two columns", diagram: "┌────┐\n│日本│\n└────┘"},
		{name: "wide runes counted as one would be off", diagram: "┌──┐\n│日本│\n└──┘", problems: []string{"3: "}},
		{name: "a combining mark takes none", diagram: "┌──┐\n│e\u0301x│\n└──┘"},
		{name: "a crossing on the border", diagram: "┌──┐\n│ab┼──► x\n└──┘"},
		{name: "open below", diagram: "┌──┐\n│ab│\n▼  ▼"},
		{name: "two boxes on a line", diagram: "┌─┐ ┌─┐\n│a│ │b │\n└─┘ └─┘", problems: []string{"3: the box opened on line 2 has ' ' at display column 7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, problems := checkBoxes("```\n" + tt.diagram + "\n```\n")
			if n == 0 {
				t.Fatalf("checkBoxes found no box in %q", tt.diagram)
			}
			if len(problems) != len(tt.problems) {
				t.Fatalf("checkBoxes(%q) = %q, want %d problems", tt.diagram, problems, len(tt.problems))
			}
			for i, p := range problems {
				if !strings.HasPrefix(p, tt.problems[i]) {
					t.Errorf("checkBoxes(%q) problem %d = %q, want it to start %q", tt.diagram, i, p, tt.problems[i])
				}
			}
		})
	}
}
