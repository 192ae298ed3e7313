package doccheck

import "testing"

// TestSlug: anchors as GitHub makes them.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Retries and backoff":               "retries-and-backoff",
		"`hopper ui`: the dashboard":        "hopper-ui-the-dashboard",
		"Flow control (keys, rates)":        "flow-control-keys-rates",
		"[PgBouncer](https://x) & the pool": "pgbouncer--the-pool",
		"Jobs_and payload versions":         "jobs_and-payload-versions",
		"Étape 2":                           "étape-2",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestParseMarkdown: blocks with their lines and languages, links outside
// code spans, repeated headings numbered, directives applied.
func TestParseMarkdown(t *testing.T) {
	src := "# Top\n\nSee [a](a.md) and `[b](b.md)`.\n\n## Top\n\n<!-- doccheck: skip why not -->\n\n```Go title=\"x\"\nx := 1\n```\n\n````md\n```go\ninner\n```\n````\n<a id=\"here\"></a>\n"
	d := ParseMarkdown("f.md", src)
	if len(d.Problems) != 0 {
		t.Fatalf("problems: %v", d.Problems)
	}
	if len(d.Links) != 1 || d.Links[0].Target != "a.md" || d.Links[0].Line != 3 {
		t.Errorf("links: %+v", d.Links)
	}
	if len(d.Blocks) != 2 {
		t.Fatalf("blocks: %+v", d.Blocks)
	}
	if b := d.Blocks[0]; b.Line != 9 || b.Lang != "go" || b.Text != "x := 1\n" || !b.Skip || b.SkipReason != "why not" {
		t.Errorf("first block: %+v", b)
	}
	if b := d.Blocks[1]; b.Lang != "md" || b.Text != "```go\ninner\n```\n" || b.Skip {
		t.Errorf("second block: %+v", b)
	}
	for _, a := range []string{"top", "top-1", "here"} {
		if !d.Anchors[a] {
			t.Errorf("no anchor %q in %v", a, d.Anchors)
		}
	}
}
