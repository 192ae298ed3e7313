package cli

import (
	"fmt"
	"slices"
	"strings"
)

// pickAction reads the action of a command of the form "hopper COMMAND
// ACTION [ARGS]": the first argument, which must be one of known, and the
// arguments after it.
func pickAction(command string, args []string, known ...string) (action string, rest []string, err error) {
	if len(args) == 0 {
		return "", nil, fmt.Errorf("%w: say %s", errUsage, orList(known))
	}
	if !slices.Contains(known, args[0]) {
		if hint := didYouMean(args[0], "", known); hint != "" {
			return "", nil, fmt.Errorf("%w: unknown %s action %q%s", errUsage, command, args[0], hint)
		}
		return "", nil, fmt.Errorf("%w: unknown %s action %q (%s)", errUsage, command, args[0], orList(known))
	}
	return args[0], args[1:], nil
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
