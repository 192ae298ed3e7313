package cli

import (
	"encoding/json"
	"flag"
	"fmt"

	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/schema"
)

// versionInfo is what hopper version prints.
type versionInfo struct {
	Version       string `json:"version"`        // the Hopper module's (buildinfo.Version), "unknown" when the build recorded none
	Revision      string `json:"revision"`       // the commit built (vcs.revision), "" when the build recorded none
	Time          string `json:"vcs_time"`       // that commit's time (vcs.time), ""
	Modified      bool   `json:"vcs_modified"`   // the checkout had uncommitted changes (vcs.modified)
	SchemaVersion uint   `json:"schema_version"` // the schema version this build needs and migrates to
	Go            string `json:"go"`
}

func versionCommand() *command {
	var asJSON bool
	return &command{
		name:    "version",
		summary: "print this build's Hopper version, the commit it was built from, the schema version it needs, and the Go it was built with (needs no database)",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: version takes no argument", errUsage)
			}
			b := buildinfo.Read()
			v := versionInfo{Version: b.Version, Revision: b.Revision, Time: b.Time, Modified: b.Modified,
				SchemaVersion: schema.Latest(), Go: b.Go}
			if v.Version == "" {
				v.Version = "unknown"
			}
			if asJSON {
				return json.NewEncoder(e.stdout).Encode(v)
			}
			fmt.Fprintf(e.stdout, "hopper %s\n%s\nschema version %d\n%s\n", v.Version, commitLine(b), v.SchemaVersion, v.Go)
			return nil
		},
	}
}

// commitLine says which commit a build is of, or why it cannot say.
func commitLine(b buildinfo.Build) string {
	if b.Revision == "" {
		return "commit " + buildinfo.Unstamped + " (" + buildinfo.NoStampReason + ")"
	}
	line := "commit " + b.Revision
	if b.Time != "" {
		line += " of " + b.Time
	}
	if b.Modified {
		line += ", with uncommitted changes"
	}
	return line
}
