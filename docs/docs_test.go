package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the module root: go test runs in docs/.
const root = ".."

// homes says where each heading of the README went when it became the
// landing page (the README of 2026-11-24 before issue 26, with the sections
// issues 21 to 25 added to it): a
// section another branch still edits in the README is to be found, and
// edited, under the same heading in this page. A heading renamed or moved
// must be changed here too.
var homes = []struct{ heading, page string }{
	{"ExactOnce", "README.md"},
	{"Try it locally", "docs/http-api.md"},
	{"PIN, payload and Idempotency-Key", "docs/http-api.md"},
	{"The API", "docs/http-api.md"},
	{"How it stays exactly-once", "docs/design.md"},
	{"Tenants", "docs/http-api.md"},
	{"A user's actions: list, cancel all, supersede", "docs/http-api.md"},
	{"Idempotency keys as a service", "docs/http-api.md"},
	{"Go client", "docs/go-client.md"},
	{"OpenAPI", "docs/http-api.md"},
	{"Idempotent Lambda handlers in Go", "docs/idempotency.md"},
	{"Expiry", "docs/design.md"},
	{"Events", "docs/events.md"},
	{"Republish: rebuild events from the table", "docs/operating.md"},
	{"Writing a subscriber", "docs/events.md"},
	{"Deploy to AWS", "docs/deploying.md"},
	{"Before you deploy: `make e2e` runs the template here", "docs/deploying.md"}, // issue 23, was in "Deploy to AWS"
	{"Multi-Region", "docs/deploying.md"},                                         // issue 25
	{"Embed in your CDK app", "docs/cdk-construct.md"},
	{"Measured", "docs/design.md"},
	{"Operating it", "docs/operating.md"},
	{"Folders", "docs/contributing.md"},
	{"Configuration (Lambda environment)", "docs/deploying.md"},
	{"Rotating the server secret (nothing lost)", "docs/operating.md"},
	// Not a heading in the old README but its own paragraph, now a section:
	{"Costs", "docs/operating.md"}, // "**Cost per million consumes**", was in "Deploy to AWS"
}

// TestOldHeadingsHaveAHome: every heading of the old README is a heading of
// the page the table names.
func TestOldHeadingsHaveAHome(t *testing.T) {
	for _, h := range homes {
		if !slices.Contains(parse(t, h.page).headings, h.heading) {
			t.Errorf("old README heading %q: not a heading of %s", h.heading, h.page)
		}
	}
}

// TestEveryPageIsLinkedFromTheReadme: the landing page lists every page.
func TestEveryPageIsLinkedFromTheReadme(t *testing.T) {
	readme := parse(t, "README.md")
	for _, page := range pages(t)[1:] {
		if !slices.ContainsFunc(readme.links, func(l link) bool { return l.target == page }) {
			t.Errorf("README.md does not link %s", page)
		}
	}
}

// TestLinks: every relative link in README.md and docs/*.md names a file or
// folder of the repository, and every #anchor a heading of its page.
func TestLinks(t *testing.T) {
	checked := 0
	for _, page := range pages(t) {
		for _, l := range parse(t, page).links {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(l.target, "#")
			target := page
			if path != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), path)))
			}
			if strings.HasPrefix(target, "../") {
				t.Errorf("%s:%d: %s leaves the repository", page, l.line, l.target)
				continue
			}
			if _, err := os.Stat(filepath.Join(root, target)); err != nil {
				t.Errorf("%s:%d: %s: no such file or folder (%s)", page, l.line, l.target, target)
				continue
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: %s: an anchor into a file that is not Markdown", page, l.line, l.target)
			} else if !slices.Contains(parse(t, target).anchors, anchor) {
				t.Errorf("%s:%d: %s: %s has no heading with anchor #%s", page, l.line, l.target, target, anchor)
			}
		}
	}
	t.Logf("%d relative links checked in %d pages", checked, len(pages(t)))
}

// TestGoBlocksAreExamples: every Go code block of every page is a run of
// whole lines of an Example function (compiled by go test, and run where it
// has an Output comment), either the whole function or its body without the
// function's indentation, or a whole Go file: a test file holding Examples
// (its package clause and imports too), or a program (package main, compiled
// by go vet ./... and make lint). So what readers copy compiles.
func TestGoBlocksAreExamples(t *testing.T) {
	examples := goExamples(t)
	if len(examples) == 0 {
		t.Fatal("no Example functions found")
	}
	blocks := 0
	for _, page := range pages(t) {
		for _, b := range parse(t, page).blocks {
			if b.lang != "go" {
				continue
			}
			blocks++
			found := ""
			for _, ex := range examples {
				if ex.file && sameLines(ex.whole, b.lines) || !ex.file && (containsRun(ex.whole, b.lines) || containsRun(ex.body, b.lines)) {
					found = ex.name
					break
				}
			}
			if found == "" {
				t.Errorf("%s:%d: this Go block is no Example's code (make it one, word for word):\n%s",
					page, b.line, strings.Join(b.lines, "\n"))
			} else {
				t.Logf("%s:%d: %s", page, b.line, found)
			}
		}
	}
	if blocks == 0 {
		t.Error("no Go blocks found in the pages")
	}
}

// TestLibraryPagesShowWholePrograms: each page for a Go developer (the
// client, the idempotency library, the CDK construct) has a Go block that is
// a whole file, imports and all, so a reader starts from a program that
// compiles rather than from fragments whose imports and variables (an
// aws.Config, a DynamoDB client, a table, jsii.Close) they have to guess.
func TestLibraryPagesShowWholePrograms(t *testing.T) {
	for _, page := range []string{"docs/go-client.md", "docs/idempotency.md", "docs/cdk-construct.md"} {
		whole := 0
		for _, b := range parse(t, page).blocks {
			if b.lang == "go" && slices.ContainsFunc(b.lines, func(l string) bool { return strings.HasPrefix(l, "package ") }) {
				whole++
			}
		}
		if whole == 0 {
			t.Errorf("%s: no Go block is a whole file (package clause, imports, code)", page)
		}
	}
}

// TestReadmeFiguresAreTheBenchmarks: the landing page's headline figures
// are the ones bench/results/latest.md records (make bench): re-recording
// the benchmark means updating them.
func TestReadmeFiguresAreTheBenchmarks(t *testing.T) {
	bench := parseTables(t, "bench/results/latest.md")
	const (
		requests = "## DynamoDB requests per outcome"
		designs  = "## Consume: ExactOnce against the two alternatives"
		cost     = "## Cost per million successful consumes"
		latency  = "## Consume latency"
		ours     = "ExactOnce (one conditional write, ALL_OLD)"
		claim    = "(b) claim record + complete + get (seed 001, Powertools)"
	)
	for _, col := range []string{"consumed", "replay (same key)", "already used", "expired", "canceled", "not active", "not found"} {
		if v := bench.cell(t, designs, []string{ours}, col); v != "1" {
			t.Errorf("latest.md: ExactOnce takes %s requests for %q; the README says 1 for every outcome", v, col)
		}
	}
	want := []string{
		"**1 DynamoDB request for every outcome**",
		fmt.Sprintf("takes %s per consume and %s per refusal",
			bench.cell(t, designs, []string{claim}, "consumed"), bench.cell(t, designs, []string{claim}, "already used")),
		fmt.Sprintf("**$%s per million consumes**", bench.cell(t, cost, []string{ours}, "$ per million")),
		fmt.Sprintf("($%s with the expiry sweeper's later read)",
			bench.cell(t, cost, []string{"ExactOnce all-in: + the sweeper's later read of the entry"}, "$ per million")),
		fmt.Sprintf("against $%s for the claim-record design", bench.cell(t, cost, []string{claim}, "$ per million")),
		fmt.Sprintf("**%s ms p50, %s ms p99**",
			bench.cell(t, latency, []string{"HTTP API", "1"}, "p50 ms"), bench.cell(t, latency, []string{"HTTP API", "1"}, "p99 ms")),
		fmt.Sprintf("alone: %s ms p50", bench.cell(t, latency, []string{"store", "1"}, "p50 ms")),
	}
	readme := strings.Join(strings.Fields(readFile(t, "README.md")), " ")
	for _, w := range want {
		t.Logf("README.md should say: %s", w)
		if !strings.Contains(readme, w) {
			t.Errorf("README.md does not say %q (bench/results/latest.md)", w)
		}
	}
}

// pages are the README and every page in docs/, README first.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no pages in docs/: %v", err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		out = append(out, rel(d))
	}
	return out
}

// rel is path from the module root, with slashes.
func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

func readFile(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type (
	page struct {
		headings []string // text after the #s
		anchors  []string // GitHub's ids of the headings
		links    []link
		blocks   []block
	}
	link struct {
		target string
		line   int
	}
	block struct {
		lang  string
		line  int // of the opening fence
		lines []string
	}
)

var (
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	codeRE    = regexp.MustCompile("`[^`]*`")
	linkRE    = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
)

// parse reads a Markdown page: headings and links outside code blocks,
// and the fenced code blocks.
func parse(t *testing.T, name string) page {
	t.Helper()
	var p page
	var prose []string // the page with code blocks blanked, line for line
	var open *block
	seen := map[string]int{}
	for i, line := range strings.Split(readFile(t, name), "\n") {
		if fence, ok := strings.CutPrefix(strings.TrimLeft(line, " "), "```"); ok {
			if open == nil {
				open = &block{lang: strings.TrimSpace(fence), line: i + 1}
			} else {
				p.blocks = append(p.blocks, *open)
				open = nil
			}
			prose = append(prose, "")
			continue
		}
		if open != nil {
			open.lines = append(open.lines, line)
			prose = append(prose, "")
			continue
		}
		prose = append(prose, line)
		if m := headingRE.FindStringSubmatch(line); m != nil {
			p.headings = append(p.headings, m[1])
			a := anchor(m[1])
			if n := seen[a]; n > 0 {
				seen[a] = n + 1
				a = fmt.Sprintf("%s-%d", a, n)
			} else {
				seen[a] = 1
			}
			p.anchors = append(p.anchors, a)
		}
	}
	if open != nil {
		t.Fatalf("%s:%d: code block never closed", name, open.line)
	}
	text := codeRE.ReplaceAllStringFunc(strings.Join(prose, "\n"), func(s string) string {
		return strings.Repeat("\n", strings.Count(s, "\n")) // keep line numbers
	})
	for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
		p.links = append(p.links, link{target: text[m[2]:m[3]], line: strings.Count(text[:m[0]], "\n") + 1})
	}
	return p
}

// anchor is the id GitHub gives a heading: lower case, punctuation other
// than - and _ dropped, spaces as hyphens.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

type example struct {
	name        string   // file: function, or the file
	whole, body []string // the function's lines; its body's, one tab less (or the file's lines)
	file        bool     // a whole file: a block must be all of it
}

// goExamples are the Example functions of every test file of the module,
// those files whole, and every program's (package main) files whole.
func goExamples(t *testing.T) []example {
	t.Helper()
	var out []example
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		wholeFile := example{name: rel(path), whole: strings.Split(string(src), "\n"), file: true}
		if !strings.HasSuffix(path, "_test.go") {
			if f.Name.Name == "main" {
				out = append(out, wholeFile)
			}
			return nil
		}
		hasExample := false
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
				continue
			}
			off := func(p token.Pos) int { return fset.Position(p).Offset }
			ex := example{
				name:  rel(path) + ": " + fn.Name.Name,
				whole: strings.Split(string(src[off(fn.Pos()):off(fn.End())]), "\n"),
			}
			for _, l := range strings.Split(strings.Trim(string(src[off(fn.Body.Lbrace)+1:off(fn.Body.Rbrace)]), "\n"), "\n") {
				ex.body = append(ex.body, strings.TrimPrefix(l, "\t"))
			}
			out = append(out, ex)
			hasExample = true
		}
		if hasExample {
			out = append(out, wholeFile)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// containsRun says whether want (without trailing empty lines) is a run of
// consecutive lines of have.
func containsRun(have, want []string) bool {
	for len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "" {
		want = want[:len(want)-1]
	}
	if len(want) == 0 {
		return false
	}
	for i := 0; i+len(want) <= len(have); i++ {
		if slices.Equal(have[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// sameLines says whether want is have, trailing empty lines aside.
func sameLines(have, want []string) bool {
	trim := func(l []string) []string {
		for len(l) > 0 && strings.TrimSpace(l[len(l)-1]) == "" {
			l = l[:len(l)-1]
		}
		return l
	}
	return len(trim(want)) > 0 && slices.Equal(trim(have), trim(want))
}

// tables are the Markdown tables of a page by the heading above them.
type tables map[string][][]string

func parseTables(t *testing.T, name string) tables {
	t.Helper()
	out := tables{}
	section := ""
	for _, line := range strings.Split(readFile(t, name), "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
			section = line
		case strings.HasPrefix(line, "|") && !strings.HasPrefix(line, "|---"):
			var cells []string
			for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
				cells = append(cells, strings.TrimSpace(c))
			}
			out[section] = append(out[section], cells)
		}
	}
	return out
}

// cell is the value in the column headed col of the row that starts with
// key, in the table under the heading that starts with section.
func (tb tables) cell(t *testing.T, section string, key []string, col string) string {
	t.Helper()
	for heading, rows := range tb {
		if !strings.HasPrefix(heading, section) || len(rows) == 0 {
			continue
		}
		c := slices.Index(rows[0], col)
		for _, row := range rows[1:] {
			if c >= 0 && c < len(row) && len(row) >= len(key) && slices.Equal(row[:len(key)], key) {
				return row[c]
			}
		}
	}
	t.Fatalf("bench/results/latest.md: no %q for %q under %q", col, key, section)
	return ""
}
