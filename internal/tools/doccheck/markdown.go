package doccheck

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Block is one fenced code block of a markdown file.
type Block struct {
	// Line is the line of the opening fence (1-based).
	Line int
	// Lang is the first word of the info string ("go", "sh", "sql").
	Lang string
	// Text is the content, without the fences and without the fence's
	// indentation. Its first line is Line+1 of the file.
	Text string
	// Skip is set by a <!-- doccheck: skip REASON --> line before the
	// fence; SkipReason is REASON.
	Skip       bool
	SkipReason string
}

// Link is one link target of a markdown file, outside code.
type Link struct {
	Line   int
	Target string
}

// Heading is one heading of a markdown file, for anchors.
type Heading struct {
	Line int
	Text string
}

// Doc is what a markdown file holds that the checks read.
type Doc struct {
	Blocks   []Block
	Links    []Link
	Headings []Heading
	// Anchors are the link fragments the file defines: its headings'
	// slugs and the ids and names of its HTML elements.
	Anchors map[string]bool
	// Problems are malformed directives and unclosed fences.
	Problems []Problem
}

var (
	fenceRE     = regexp.MustCompile("^([ \t]*)(`{3,}|~{3,})[ \t]*([^`]*?)[ \t]*$")
	directiveRE = regexp.MustCompile(`^\s*<!--\s*doccheck:\s*(.*?)\s*-->\s*$`)
	headingRE   = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$`)
	// inline links and images: [text](target "title"), ![alt](<target>)
	inlineLinkRE = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// reference definitions: [label]: target
	refDefRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// HTML: <a href="...">, <img src="...">
	htmlLinkRE = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]*)"`)
	htmlIDRE   = regexp.MustCompile(`(?i)<[a-z][^>]*\b(?:id|name)\s*=\s*"([^"]*)"`)
	// in headings
	headingLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	headingTagRE  = regexp.MustCompile(`<[^>]*>`)
)

// ParseMarkdown reads the fenced code blocks, links, headings and doccheck
// directives of a markdown file. file names it in problems.
func ParseMarkdown(file, src string) *Doc {
	d := &Doc{Anchors: map[string]bool{}}
	lines := strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")
	slugs := map[string]int{}
	var pending *Problem // a directive waiting for its fence
	var skip, reason = false, ""
	inComment := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		n := i + 1
		if m := fenceRE.FindStringSubmatch(line); m != nil && (m[2][0] != '`' || !strings.Contains(m[3], "`")) {
			indent, fence, info := m[1], m[2], m[3]
			b := Block{Line: n, Lang: strings.ToLower(firstWord(info)), Skip: skip, SkipReason: reason}
			skip, reason, pending = false, "", nil
			var body []string
			closed := false
			for i++; i < len(lines); i++ {
				l := lines[i]
				if t := strings.TrimSpace(l); len(t) >= len(fence) && strings.Trim(t, fence[:1]) == "" {
					closed = true
					break
				}
				body = append(body, stripIndent(l, len(indent)))
			}
			if !closed {
				d.Problems = append(d.Problems, Problem{File: file, Line: n, Msg: "code block is never closed"})
			}
			b.Text = strings.Join(body, "\n")
			if len(body) > 0 {
				b.Text += "\n"
			}
			d.Blocks = append(d.Blocks, b)
			continue
		}
		if m := directiveRE.FindStringSubmatch(line); m != nil {
			if pending != nil {
				d.Problems = append(d.Problems, *pending)
			}
			verb, rest := cutWord(m[1])
			switch strings.TrimSuffix(verb, ":") {
			case "skip":
				rest = strings.TrimSpace(strings.TrimLeft(rest, ":-—– "))
				if rest == "" {
					d.Problems = append(d.Problems, Problem{File: file, Line: n, Msg: "doccheck: skip needs a reason after it: <!-- doccheck: skip REASON -->"})
				}
				skip, reason = true, rest
				pending = &Problem{File: file, Line: n, Msg: "doccheck: skip is not followed by a code block"}
			default:
				d.Problems = append(d.Problems, Problem{File: file, Line: n, Msg: "unknown doccheck directive " + strconv.Quote(m[1]) + " (the one directive is <!-- doccheck: skip REASON -->)"})
			}
			continue
		}
		if strings.TrimSpace(line) != "" && pending != nil {
			// A directive applies to the fence right after it (blank
			// lines between are fine).
			d.Problems = append(d.Problems, *pending)
			pending, skip, reason = nil, false, ""
		}
		// HTML comments hold no links.
		text := line
		if inComment {
			end := strings.Index(text, "-->")
			if end < 0 {
				continue
			}
			text, inComment = text[end+3:], false
		}
		for {
			start := strings.Index(text, "<!--")
			if start < 0 {
				break
			}
			end := strings.Index(text[start:], "-->")
			if end < 0 {
				text, inComment = text[:start], true
				break
			}
			text = text[:start] + text[start+end+3:]
		}
		if m := headingRE.FindStringSubmatch(text); m != nil {
			d.Headings = append(d.Headings, Heading{Line: n, Text: m[2]})
			slug := Slug(m[2])
			if k := slugs[slug]; k > 0 {
				d.Anchors[slug+"-"+strconv.Itoa(k)] = true
			} else {
				d.Anchors[slug] = true
			}
			slugs[slug]++
		}
		for _, m := range htmlIDRE.FindAllStringSubmatch(text, -1) {
			d.Anchors[m[1]] = true
		}
		plain := stripCodeSpans(text)
		for _, m := range inlineLinkRE.FindAllStringSubmatch(plain, -1) {
			d.Links = append(d.Links, Link{Line: n, Target: strings.Trim(m[1], "<>")})
		}
		if m := refDefRE.FindStringSubmatch(plain); m != nil {
			d.Links = append(d.Links, Link{Line: n, Target: strings.Trim(m[1], "<>")})
		}
		for _, m := range htmlLinkRE.FindAllStringSubmatch(plain, -1) {
			d.Links = append(d.Links, Link{Line: n, Target: m[1]})
		}
	}
	if pending != nil {
		d.Problems = append(d.Problems, *pending)
	}
	return d
}

// Slug is the anchor GitHub gives a heading: its text without markup,
// lower case, punctuation removed, spaces as hyphens.
func Slug(heading string) string {
	heading = headingLinkRE.ReplaceAllString(heading, "$1") // [text](url) reads as text
	heading = headingTagRE.ReplaceAllString(heading, "")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func stripIndent(line string, n int) string {
	for i := 0; i < n && len(line) > 0 && (line[0] == ' ' || line[0] == '\t'); i++ {
		line = line[1:]
	}
	return line
}

func firstWord(s string) string {
	w, _ := cutWord(s)
	// ```go title="x" and ```{.go} forms
	return strings.Trim(w, "{}.")
}

func cutWord(s string) (string, string) {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i], strings.TrimSpace(s[i:])
	}
	return s, ""
}

// stripCodeSpans blanks the `code spans` of a line: links in them are
// examples, not links.
func stripCodeSpans(s string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		n := i
		for n < len(s) && s[n] == '`' {
			n++
		}
		run := s[i:n]
		// the closing run has the same length, exactly
		end := -1
		for j := n; j < len(s); {
			k := strings.Index(s[j:], run)
			if k < 0 {
				break
			}
			k += j
			m := k + len(run)
			if m < len(s) && s[m] == '`' {
				for m < len(s) && s[m] == '`' {
					m++
				}
				j = m
				continue
			}
			end = k
			break
		}
		if end < 0 {
			b.WriteString(s[:n])
			s = s[n:]
			continue
		}
		b.WriteString(s[:i])
		b.WriteString("``")
		s = s[end+len(run):]
	}
}
