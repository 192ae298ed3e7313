// Package tests holds Hopper's end-to-end suites of the hopper binary and
// of deployments: it builds the hopper binary and runs it, and Hopper
// beside PgBouncer, under least privilege, embedded in a blank module, and
// from psql, Python and Node, against a real PostgreSQL. The suites of
// worker processes killed and restarted are in tests/chaos; what both
// share is in tests/internal/bed.
package tests
