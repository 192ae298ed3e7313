package schema

import (
	"fmt"
	"strings"
)

// This file splits a migration's text into the statements Citus is sent
// one at a time (see citus.go). It is a lexer, not a parser: it knows
// PostgreSQL's lexical rules (comments, nested block comments, quoted
// strings and identifiers, escape strings, dollar quotes, parentheses) and
// psql's rule for the semicolons inside a CREATE FUNCTION's BEGIN ATOMIC
// body, which is what finding the statements' ends needs. A full parser
// (pganalyze/pg_query_go) would need cgo in every program that migrates;
// TestStatementSplitIsEquivalent proves, migration by migration on plain
// PostgreSQL, that the split statements make the same schema as the file.

// token is one lexical token of a statement: a word (keyword or unquoted
// identifier, kept as written), a quoted identifier, a string, or one
// character of punctuation or operator. Comments and white space are not
// tokens.
type token struct {
	kind       tokenKind
	text       string // the token's source text
	start, end int    // byte offsets in the text lexed
}

type tokenKind int

const (
	tokWord tokenKind = iota
	tokQuotedIdent
	tokString // '…', E'…', U&'…', $tag$…$tag$, B'…', X'…'
	tokNumber
	tokPunct
)

// is reports whether t is the word w, in any case.
func (t token) is(w string) bool { return t.kind == tokWord && strings.EqualFold(t.text, w) }

// sqlStatement is one statement of a migration: its text, from its first
// token through its semicolon, and its tokens (offsets in text).
type sqlStatement struct {
	text   string
	tokens []token
}

// splitStatements splits a migration's text into its statements, in
// order. Comments before a statement and between statements are left out
// (comments inside one are kept in its text); so is the text after the
// last semicolon when it holds no token. It fails on text that does not
// lex (a string, quoted identifier, dollar quote or block comment left
// open).
func splitStatements(sql string) ([]sqlStatement, error) {
	var out []sqlStatement
	var toks []token
	// psql's heuristic (psqlscan.l): in a statement that begins CREATE [OR
	// REPLACE] FUNCTION|PROCEDURE, BEGIN opens a body (BEGIN ATOMIC) that
	// END closes, and a CASE inside it also ends with END; a semicolon
	// ends the statement only outside parentheses and such bodies.
	var firstWords []string
	depth, beginDepth := 0, 0
	flush := func(end int) {
		if len(toks) > 0 {
			base := toks[0].start
			st := sqlStatement{text: sql[base:end]}
			for _, t := range toks {
				t.start -= base
				t.end -= base
				st.tokens = append(st.tokens, t)
			}
			out = append(out, st)
		}
		toks, firstWords, depth, beginDepth = nil, nil, 0, 0
	}
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case isSpace(c):
			i++
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end, err := blockCommentEnd(sql, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '\'':
			end, err := quotedEnd(sql, i, '\'', false)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tokString, sql[i:end], i, end})
			i = end
		case c == '"':
			end, err := quotedEnd(sql, i, '"', false)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{tokQuotedIdent, sql[i:end], i, end})
			i = end
		case c == '$' && dollarTagEnd(sql, i) > 0:
			tag := sql[i:dollarTagEnd(sql, i)]
			closeAt := strings.Index(sql[i+len(tag):], tag)
			if closeAt < 0 {
				return nil, fmt.Errorf("a dollar-quoted string opened by %s at byte %d is not closed", tag, i)
			}
			end := i + len(tag) + closeAt + len(tag)
			toks = append(toks, token{tokString, sql[i:end], i, end})
			i = end
		case isIdentStart(c):
			end := i + 1
			for end < len(sql) && isIdentChar(sql[end]) {
				end++
			}
			word := sql[i:end]
			// A string's prefix: E'…' (backslash escapes), U&'…', B'…', X'…'.
			if end < len(sql) && sql[end] == '\'' && len(word) == 1 && strings.ContainsAny(word, "eEbBxXnN") {
				strEnd, err := quotedEnd(sql, end, '\'', word == "e" || word == "E")
				if err != nil {
					return nil, err
				}
				toks = append(toks, token{tokString, sql[i:strEnd], i, strEnd})
				i = strEnd
				continue
			}
			if (word == "u" || word == "U") && strings.HasPrefix(sql[end:], "&'") {
				strEnd, err := quotedEnd(sql, end+1, '\'', false)
				if err != nil {
					return nil, err
				}
				toks = append(toks, token{tokString, sql[i:strEnd], i, strEnd})
				i = strEnd
				continue
			}
			toks = append(toks, token{tokWord, word, i, end})
			if len(firstWords) < 4 {
				firstWords = append(firstWords, strings.ToLower(word))
			}
			if createsRoutine(firstWords) && depth == 0 {
				switch {
				case strings.EqualFold(word, "begin"):
					beginDepth++
				case strings.EqualFold(word, "case") && beginDepth > 0:
					beginDepth++
				case strings.EqualFold(word, "end") && beginDepth > 0:
					beginDepth--
				}
			}
			i = end
		case c >= '0' && c <= '9':
			end := i + 1
			for end < len(sql) && (isIdentChar(sql[end]) || sql[end] == '.') {
				end++
			}
			toks = append(toks, token{tokNumber, sql[i:end], i, end})
			i = end
		case c == ';':
			if depth == 0 && beginDepth == 0 {
				flush(i + 1)
			} else {
				toks = append(toks, token{tokPunct, ";", i, i + 1})
			}
			i++
		default:
			switch c {
			case '(', '[':
				depth++
			case ')', ']':
				depth = max(depth-1, 0)
			}
			toks = append(toks, token{tokPunct, string(c), i, i + 1})
			i++
		}
	}
	if len(toks) > 0 {
		flush(len(sql))
	}
	return out, nil
}

// createsRoutine reports whether a statement's first words are CREATE [OR
// REPLACE] FUNCTION|PROCEDURE, psql's test (firstWords are lower case).
func createsRoutine(firstWords []string) bool {
	at := func(i int, w string) bool { return len(firstWords) > i && firstWords[i] == w }
	if !at(0, "create") {
		return false
	}
	if at(1, "function") || at(1, "procedure") {
		return true
	}
	return at(1, "or") && at(2, "replace") && (at(3, "function") || at(3, "procedure"))
}

// quotedEnd is the offset just past the quoted string or identifier that
// opens at start with q; a doubled q is part of it, and with backslashes
// (an E'…' string) a backslash escapes the next byte.
func quotedEnd(sql string, start int, q byte, backslashes bool) (int, error) {
	for i := start + 1; i < len(sql); i++ {
		switch {
		case backslashes && sql[i] == '\\':
			i++
		case sql[i] == q && i+1 < len(sql) && sql[i+1] == q:
			i++
		case sql[i] == q:
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("a quoted %c at byte %d is not closed", q, start)
}

// blockCommentEnd is the offset just past the block comment that opens at
// start; block comments nest.
func blockCommentEnd(sql string, start int) (int, error) {
	nest := 0
	for i := start; i+1 < len(sql); i++ {
		switch {
		case sql[i] == '/' && sql[i+1] == '*':
			nest++
			i++
		case sql[i] == '*' && sql[i+1] == '/':
			nest--
			i++
			if nest == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("a block comment at byte %d is not closed", start)
}

// dollarTagEnd is the offset just past a dollar quote's opening tag ($$ or
// $tag$) at start, or 0 when none opens there ($1 is a parameter). A $
// inside a word is part of the word, which the caller has consumed.
func dollarTagEnd(sql string, start int) int {
	i := start + 1
	if i < len(sql) && sql[i] == '$' {
		return i + 1
	}
	if i >= len(sql) || !isIdentStart(sql[i]) {
		return 0
	}
	for i < len(sql) && isIdentChar(sql[i]) && sql[i] != '$' {
		i++
	}
	if i < len(sql) && sql[i] == '$' {
		return i + 1
	}
	return 0
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}

func isIdentChar(c byte) bool {
	return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$'
}

// splitAlterTable returns an ALTER TABLE statement with several
// subcommands as one ALTER TABLE per subcommand, in order, each with the
// statement's own head (ALTER TABLE [IF EXISTS] [ONLY] name [*]) and the
// subcommand's own text: run in one transaction they make what the one
// statement makes. Citus refuses an ADD CONSTRAINT among other
// subcommands. Any other statement, and an ALTER TABLE with one
// subcommand, comes back as it is.
func splitAlterTable(st sqlStatement) []string {
	toks := st.tokens
	if len(toks) < 4 || !toks[0].is("alter") || !toks[1].is("table") {
		return []string{st.text}
	}
	i := 2
	if toks[i].is("if") && i+1 < len(toks) && toks[i+1].is("exists") {
		i += 2
	}
	if i < len(toks) && toks[i].is("all") {
		return []string{st.text} // ALTER TABLE ALL IN TABLESPACE
	}
	if i < len(toks) && toks[i].is("only") {
		i++
	}
	// The name: identifiers joined by dots, then an optional *.
	for i < len(toks) {
		if toks[i].kind != tokWord && toks[i].kind != tokQuotedIdent {
			return []string{st.text}
		}
		i++
		if i < len(toks) && toks[i].text == "." {
			i++
			continue
		}
		break
	}
	if i < len(toks) && toks[i].text == "*" {
		i++
	}
	if i >= len(toks) {
		return []string{st.text}
	}
	head := st.text[:toks[i-1].end]
	// The subcommands: split at the commas outside parentheses and
	// brackets (a subcommand's own commas are inside them: a type's
	// modifiers, an expression's arguments, an array).
	var parts []string
	from, depth := toks[i].start, 0
	for _, t := range toks[i:] { // the statement's ending semicolon is no token
		if t.kind != tokPunct {
			continue
		}
		switch t.text {
		case "(", "[":
			depth++
		case ")", "]":
			depth--
		case ",":
			if depth == 0 {
				parts = append(parts, strings.TrimSpace(st.text[from:t.start]))
				from = t.end
			}
		}
	}
	if len(parts) == 0 {
		return []string{st.text}
	}
	parts = append(parts, strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(st.text[from:]), ";")))
	out := make([]string, len(parts))
	for j, p := range parts {
		out[j] = head + " " + p + ";"
	}
	return out
}
