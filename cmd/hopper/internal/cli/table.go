package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// printTable prints items as aligned columns: the header, then one line
// per item, whose cells row separates with tabs. With no items it says
// "(no <what>)".
func printTable[T any](w io.Writer, what, header string, items []T, row func(T) string) error {
	if len(items) == 0 {
		_, err := fmt.Fprintf(w, "(no %s)\n", what)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, item := range items {
		fmt.Fprintln(tw, row(item))
	}
	return tw.Flush()
}
