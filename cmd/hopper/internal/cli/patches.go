package cli

import (
	"encoding/json"
	"flag"
	"fmt"

	"github.com/hopperq/hopper"
)

// patchRow is one patch's use, as patches --json prints it.
type patchRow struct {
	Kind     string `json:"kind"`
	Patch    string `json:"patch"`
	Marked   int64  `json:"marked"`
	Unmarked int64  `json:"unmarked"`
}

func patchesCommand() *command {
	var asJSON bool
	return &command{
		name: "patches",
		args: "[KIND PATCH] [--json]",
		summary: "durable handlers' patches (worker.Patched): every patch whose marker live jobs hold, by kind, " +
			"or one kind's patch: the live jobs that hold its marker (keep worker.DeprecatePatch while any does) " +
			"and those with durable records but no marker (they may take the old path: keep worker.Patched while any does)",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			switch {
			case len(args) != 0 && len(args) != 2:
				return fmt.Errorf("%w: patches takes nothing, or a kind and a patch's name", errUsage)
			case len(args) == 2 && (args[0] == "" || args[1] == ""):
				return fmt.Errorf("%w: patches takes a kind and a patch's name, not empty ones", errUsage)
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			var uses []hopper.PatchUse
			if len(args) == 2 {
				use, err := client.GetPatchUse(e.ctx, args[0], args[1])
				if err != nil {
					return err
				}
				uses = []hopper.PatchUse{use}
			} else if uses, err = client.ListPatches(e.ctx); err != nil {
				return err
			}
			if asJSON {
				rows := make([]patchRow, len(uses))
				for i, u := range uses {
					rows[i] = patchRow(u)
				}
				return json.NewEncoder(e.stdout).Encode(rows)
			}
			if len(args) == 2 {
				fmt.Fprintln(e.stdout, patchAdvice(uses[0]))
				return nil
			}
			return printTable(e.stdout, "patches held by live jobs", "KIND\tPATCH\tMARKED\tUNMARKED", uses, func(u hopper.PatchUse) string {
				return fmt.Sprintf("%s\t%s\t%d\t%d", u.Kind, u.Patch, u.Marked, u.Unmarked)
			})
		},
	}
}

// patchAdvice says what a kind's patch still needs, from its use.
func patchAdvice(u hopper.PatchUse) string {
	head := fmt.Sprintf("patch %s of %s: marked %s; unmarked (durable records without the marker) %s",
		quoteName(u.Patch), u.Kind, plural(u.Marked, "live job"), plural(u.Unmarked, "live job"))
	switch {
	case u.Unmarked > 0:
		return head + "; keep worker.Patched with the old path while any run may still take it"
	case u.Marked > 0:
		return head + "; the old path can go: replace worker.Patched with worker.DeprecatePatch, and keep it while a job holds the marker"
	default:
		return head + "; no live job needs it: its worker.Patched (or worker.DeprecatePatch) call can go"
	}
}
