package doccheck

import (
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

var schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// checkLinks checks the relative links of a markdown file: the file or
// directory exists in the repository, and a #fragment into a markdown file
// names one of its headings. It returns the problems and how many links it
// checked.
func (c *Checker) checkLinks(rel string, d *Doc) ([]Problem, int) {
	var problems []Problem
	n := 0
	dir := path.Dir(filepath.ToSlash(rel))
	for _, l := range d.Links {
		t := l.Target
		if t == "" || schemeRE.MatchString(t) || strings.HasPrefix(t, "//") {
			continue // https:, mailto:, protocol-relative: not ours to check
		}
		n++
		bad := func(msg string) {
			problems = append(problems, Problem{File: rel, Line: l.Line, Msg: "link " + t + ": " + msg})
		}
		p, frag, _ := strings.Cut(t, "#")
		p, _, _ = strings.Cut(p, "?")
		if up, err := url.PathUnescape(p); err == nil {
			p = up
		}
		target := filepath.ToSlash(rel)
		if p != "" {
			if strings.HasPrefix(p, "/") {
				target = path.Clean(strings.TrimPrefix(p, "/"))
			} else {
				target = path.Clean(path.Join(dir, p))
			}
			if target == ".." || strings.HasPrefix(target, "../") {
				bad("leads outside the repository")
				continue
			}
			if _, err := os.Stat(filepath.Join(c.Root, filepath.FromSlash(target))); err != nil {
				bad("no such file or directory in the repository")
				continue
			}
		}
		if frag == "" || !strings.HasSuffix(strings.ToLower(target), ".md") {
			continue
		}
		anchors, err := c.anchorsOf(target)
		if err != nil {
			bad(err.Error())
			continue
		}
		if f, err := url.PathUnescape(frag); err == nil {
			frag = f
		}
		if !anchors[frag] && !anchors[strings.ToLower(frag)] {
			bad("no heading with anchor #" + frag + " in " + target)
		}
	}
	return problems, n
}

// anchorsOf returns the anchors of a markdown file of the repository.
func (c *Checker) anchorsOf(rel string) (map[string]bool, error) {
	if a, ok := c.anchors[rel]; ok {
		return a, nil
	}
	src, err := os.ReadFile(filepath.Join(c.Root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	if c.anchors == nil {
		c.anchors = map[string]map[string]bool{}
	}
	a := ParseMarkdown(rel, string(src)).Anchors
	c.anchors[rel] = a
	return a, nil
}
