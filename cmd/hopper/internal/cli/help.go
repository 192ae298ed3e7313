package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// movedCommands are the spellings of Hopper's commands before 1.0 (a
// command is a plural noun, then a verb) and what replaced each. They are
// refused with the new spelling, not run: a script that uses them is to
// be changed once, not to break at 1.0.
var movedCommands = map[string]string{
	"queue":  "hopper queues list | pause NAME | resume NAME | purge NAME",
	"cancel": "hopper jobs cancel ID...",
	"purge":  "hopper queues purge NAME",
}

// notACommand is the one line for a command name hopper does not have: the
// new spelling of a moved one, else the nearest command, if one is near.
func notACommand(name string) string {
	if now, ok := movedCommands[name]; ok {
		return fmt.Sprintf("hopper %s: this command is now %s", name, now)
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return fmt.Sprintf("hopper: unknown command %q%s (run hopper help)", name, didYouMean(name, "", names))
}

// printCommands lists the commands, each with its actions and what it
// does, for hopper help.
func printCommands(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.name, strings.Join(c.actions, "|"), c.summary)
	}
	tw.Flush()
}
