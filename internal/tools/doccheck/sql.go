package doccheck

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statement is one SQL statement of a block.
type Statement struct {
	Line int // of its first line, 1-based within the block
	Text string
}

// SplitSQL splits SQL text into statements at semicolons outside quotes,
// comments and dollar-quoted strings. Statements that are only comments
// are left out.
func SplitSQL(text string) []Statement {
	var out []Statement
	start, line, startLine := 0, 1, 1
	flush := func(end int) {
		stmt := text[start:end]
		if strings.TrimSpace(stripSQLComments(stmt)) != "" {
			// the statement starts at its first non-blank line
			lead := len(stmt) - len(strings.TrimLeft(stmt, " \t\r\n"))
			out = append(out, Statement{Line: startLine + strings.Count(stmt[:lead], "\n"), Text: strings.TrimSpace(stmt)})
		}
	}
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == '\n':
			line++
		case c == '\'' || c == '"':
			for i++; i < len(text) && text[i] != c; i++ {
				if text[i] == '\n' {
					line++
				}
			}
		case c == '-' && strings.HasPrefix(text[i:], "--"):
			for ; i < len(text) && text[i] != '\n'; i++ {
			}
			i-- // the newline counts the line
		case c == '/' && strings.HasPrefix(text[i:], "/*"):
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				end = len(text) - i - 2
			}
			line += strings.Count(text[i:i+2+end], "\n")
			i += end + 3
		case c == '$':
			if m := dollarTagRE.FindString(text[i:]); m != "" {
				end := strings.Index(text[i+len(m):], m)
				if end < 0 {
					end = len(text) - i - len(m)
				}
				line += strings.Count(text[i:i+len(m)+end], "\n")
				i += len(m) + end + len(m) - 1
			}
		case c == ';':
			flush(i)
			start, startLine = i+1, line
		}
	}
	if start < len(text) {
		flush(len(text))
	}
	return out
}

var (
	dollarTagRE = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)?\$`)
	paramRE     = regexp.MustCompile(`\$[0-9]+`)
)

var (
	blockCommentRE = regexp.MustCompile(`(?s)/\*.*?\*/`)
	lineCommentRE  = regexp.MustCompile(`--[^\n]*`)
	// transaction control: the block's statements run in the checker's
	// own transaction
	txControlRE = regexp.MustCompile(`(?i)^(BEGIN|START\s+TRANSACTION|COMMIT|END|ABORT|ROLLBACK(\s+(WORK|TRANSACTION))?\s*$)`)
)

func stripSQLComments(s string) string {
	return lineCommentRE.ReplaceAllString(blockCommentRE.ReplaceAllString(s, ""), "")
}

// SQLRunner returns a function that checks a SQL block against the schema
// pool's search_path leads to: each statement runs in one transaction
// that is rolled back, so a block sees what the statements before it did
// and leaves nothing behind. A statement with $1 parameters is prepared
// (parsed and planned against the schema) rather than run. A statement
// PostgreSQL refuses to run in a transaction (VACUUM, CREATE INDEX
// CONCURRENTLY) counts as checked once it parsed. It returns the line
// within the block of the first statement that fails, and its error.
func SQLRunner(pool *pgxpool.Pool) func(text string) (int, error) {
	return func(text string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '10s'; SET LOCAL lock_timeout = '2s'"); err != nil {
			return 0, err
		}
		for i, st := range SplitSQL(text) {
			if txControlRE.MatchString(strings.TrimSpace(stripSQLComments(st.Text))) {
				continue
			}
			sp := fmt.Sprintf("doccheck_%d", i)
			if _, err := tx.Exec(ctx, "SAVEPOINT "+sp); err != nil {
				return st.Line, err
			}
			if paramRE.MatchString(st.Text) {
				_, err = tx.Prepare(ctx, "", st.Text)
			} else {
				_, err = tx.Exec(ctx, st.Text, pgx.QueryExecModeSimpleProtocol)
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ActiveSQLTransaction { // parsed, cannot run here
				if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+sp); err != nil {
					return st.Line, err
				}
				continue
			}
			if err != nil {
				line := st.Line
				if errors.As(err, &pgErr) && pgErr.Position > 0 {
					if r := []rune(st.Text); int(pgErr.Position) <= len(r) {
						line += strings.Count(string(r[:pgErr.Position-1]), "\n")
					}
				}
				return line, err
			}
		}
		return 0, nil
	}
}
