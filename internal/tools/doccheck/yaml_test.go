package doccheck_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/hopperq/hopper/internal/tools/doccheck"
)

// TestDocsYAML: every ```yaml block of the docs parses, each of its
// documents, so that a manifest copied from a guide (docs/kubernetes.md)
// applies. doccheck's Checker leaves yaml blocks alone; this test reads
// them.
func TestDocsYAML(t *testing.T) {
	t.Parallel()
	blocks := 0
	for _, rel := range docFiles(t) {
		src, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range doccheck.ParseMarkdown(rel, string(src)).Blocks {
			if (b.Lang != "yaml" && b.Lang != "yml") || b.Skip {
				continue
			}
			blocks++
			if err := parseYAML(b.Text); err != nil {
				t.Errorf("%s:%d: the yaml block does not parse: %v", rel, b.Line, err)
			}
		}
	}
	if blocks == 0 {
		t.Error("no ```yaml block found in the docs: is the parser reading them?")
	}
}

// parseYAML decodes every document of a YAML stream, and requires each to
// be a mapping (what a manifest or a config file is).
func parseYAML(text string) error {
	d := yaml.NewDecoder(strings.NewReader(text))
	for {
		var doc map[string]any
		if err := d.Decode(&doc); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func TestParseYAML(t *testing.T) {
	t.Parallel()
	if err := parseYAML("a: 1\n---\nb: {c: [1, 2]}\n"); err != nil {
		t.Errorf("two documents: %v", err)
	}
	for _, bad := range []string{"a: 1\n  b: 2\n", "key: [unclosed\n", "- a list\n", "a: 1\na: 2\n"} {
		if parseYAML(bad) == nil {
			t.Errorf("parseYAML(%q) = nil, want an error", bad)
		}
	}
}
