package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"runtime"

	"github.com/hopperq/hopper/internal/buildinfo"
	"github.com/hopperq/hopper/schema"
)

// versionInfo is what hopper version prints.
type versionInfo struct {
	Version       string `json:"version"`        // the Hopper module's (buildinfo.Version), "unknown" when the build recorded none
	SchemaVersion uint   `json:"schema_version"` // the schema version this build needs and migrates to
	Go            string `json:"go"`
}

func versionCommand() *command {
	var asJSON bool
	return &command{
		name:    "version",
		summary: "print this build's Hopper version, the schema version it needs, and the Go it was built with (needs no database)",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: version takes no argument", errUsage)
			}
			v := versionInfo{Version: buildinfo.Version(), SchemaVersion: schema.Latest(), Go: runtime.Version()}
			if v.Version == "" {
				v.Version = "unknown"
			}
			if asJSON {
				return json.NewEncoder(e.stdout).Encode(v)
			}
			fmt.Fprintf(e.stdout, "hopper %s\nschema version %d\n%s\n", v.Version, v.SchemaVersion, v.Go)
			return nil
		},
	}
}
