package cli

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
)

// nearest returns the candidate closest to word, for a "did you mean"
// hint, or "" when none is close enough to be a likely typo: within an
// edit distance that grows with the word's length (one edit for a word of
// up to four letters, two up to eight, three beyond), a swap of two
// neighbouring letters counting as one edit; failing that, the one
// candidate that word begins (three letters at least: "--older" for
// --older-than). Ties go to the earlier candidate; word itself is no
// suggestion.
func nearest(given string, candidates []string) string {
	word := strings.ToLower(given)
	if word == "" {
		return ""
	}
	limit := 3
	switch n := len([]rune(word)); {
	case n <= 4:
		limit = 1
	case n <= 8:
		limit = 2
	}
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if c == given {
			continue
		}
		if d := editDistance(word, strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best != "" || len(word) < 3 {
		return best
	}
	for _, c := range candidates {
		if c != given && strings.HasPrefix(strings.ToLower(c), word) {
			if best != "" {
				return "" // ambiguous
			}
			best = c
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and swaps of two
// neighbouring letters that turn one into the other.
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// d[i][j] is the distance between s[:i] and t[:j].
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(s)][len(t)]
}

// didYouMean is "; did you mean X?" for the candidate nearest word, or ""
// when none is near. prefix goes before the suggestion ("--" for flags).
func didYouMean(word, prefix string, candidates []string) string {
	if s := nearest(word, candidates); s != "" {
		return "; did you mean " + prefix + s + "?"
	}
	return ""
}

// The messages of package flag that name a flag, as it writes them
// ("-name", whichever dash the user typed).
var (
	flagUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	flagNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
	flagBadValue  = regexp.MustCompile(`^invalid (boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-+([^:]*): (.*)$`)
)

// flagError rewrites an error of fs.Parse in the CLI's words: flags are
// written --name, and an unknown flag names the nearest one fs has
// ("unknown flag --shema; did you mean --schema?").
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := flagUndefined.FindStringSubmatch(msg); m != nil {
		name, _, _ := strings.Cut(m[1], "=")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		return errors.New("unknown flag --" + name + didYouMean(name, "--", names))
	}
	if m := flagNoValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s needs a value", m[1])
	}
	if m := flagBadValue.FindStringSubmatch(msg); m != nil {
		if m[4] == "parse error" { // package flag's word for a value its type cannot read
			return fmt.Errorf("invalid %svalue %s for --%s", m[1], m[2], m[3])
		}
		return fmt.Errorf("invalid %svalue %s for --%s: %s", m[1], m[2], m[3], m[4])
	}
	return err
}
