package schema

// What the tests of the Citus path reach (citus.go, statements.go).
var CitusStatements = citusStatements

// CitusPath sends migrations the way Citus takes them (statement by
// statement, with its settings) on any server: plain PostgreSQL accepts a
// placeholder setting such as citus.enable_unsafe_triggers, so the path
// runs, and can be compared, there.
func CitusPath() Option { return func(o *options) { o.citus = "(forced by a test)" } }

// SplitStatements is a migration's statements as the file has them, none
// split nor moved.
func SplitStatements(text string) ([]string, error) {
	split, err := splitStatements(text)
	var out []string
	for _, st := range split {
		out = append(out, st.text)
	}
	return out, err
}
