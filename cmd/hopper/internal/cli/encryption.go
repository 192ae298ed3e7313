package cli

import (
	"encoding/json"
	"flag"
	"fmt"
)

// keyUseRow is one row of what hopper encryption --json prints.
type keyUseRow struct {
	KeyID  string `json:"key_id"`
	Place  string `json:"place"`
	Kind   string `json:"kind"`
	Values int64  `json:"values"`
}

func encryptionCommand() *command {
	var asJSON bool
	return &command{
		name: "encryption",
		args: "[--json]",
		summary: "encrypted payloads (jobs.Encrypted): the keys stored values were encrypted with, counted by place (payload, step, event) and kind; " +
			"a key no value names can leave its keyring. Reads the job, dead, history, step and event tables whole",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		run: func(e *env, _ *flag.FlagSet, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: encryption takes no argument", errUsage)
			}
			client, done, err := e.connectClient()
			if err != nil {
				return err
			}
			defer done()
			uses, err := client.EncryptionKeys(e.ctx)
			if err != nil {
				return err
			}
			rows := make([]keyUseRow, len(uses))
			for i, u := range uses {
				rows[i] = keyUseRow{KeyID: u.KeyID, Place: u.Place, Kind: u.Kind, Values: u.Values}
			}
			if asJSON {
				return json.NewEncoder(e.stdout).Encode(rows)
			}
			return printTable(e.stdout, "encrypted value", "KEY\tPLACE\tKIND\tVALUES", rows, func(r keyUseRow) string {
				kind := r.Kind
				if kind == "" {
					kind = "-"
				}
				return fmt.Sprintf("%s\t%s\t%s\t%d", r.KeyID, r.Place, kind, r.Values)
			})
		},
	}
}
