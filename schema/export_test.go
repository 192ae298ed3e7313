package schema

// What the tests of the Citus path reach (citus.go, statements.go).
var CitusStatements = citusStatements

// CitusPath sends migrations the way Citus takes them (statement by
// statement, with its settings) on any server: a placeholder setting such
// as citus.enable_unsafe_triggers is accepted by plain PostgreSQL, so the
// path runs, and can be compared, there.
func CitusPath() Option { return func(o *options) { o.citus = "(forced by a test)" } }
