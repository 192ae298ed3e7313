package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// confirm asks question on stdout and reads one line of stdin: the one
// question of every command that deletes or drops (queues purge, dead purge,
// migrate down), each skipped by its --yes. It returns nil when the
// answer accepts, else an error saying that nothing was done (nothing is
// "deleted", "undone") and how to skip the question.
//
// A closed or empty stdin (a script, a pipe, cron) is no answer: the
// command refuses rather than deleting unasked. wordOnly accepts "yes" in
// full only, for what no retry can bring back (dropping tables); otherwise
// "y" will do.
func confirm(e *env, question, nothing string, wordOnly bool) error {
	fmt.Fprint(e.stdout, question)
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	if answer == "" && errors.Is(err, io.EOF) {
		fmt.Fprintln(e.stdout) // end the question's line: the error follows on stderr
		return fmt.Errorf("not confirmed: no answer on stdin; nothing %s (pass --yes to skip the question)", nothing)
	}
	switch {
	case answer == "yes", answer == "y" && !wordOnly:
		return nil
	case wordOnly:
		return fmt.Errorf("not confirmed; nothing %s (type yes, or pass --yes to skip the question)", nothing)
	default:
		return fmt.Errorf("not confirmed; nothing %s (pass --yes to skip the question)", nothing)
	}
}
