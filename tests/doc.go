// Package tests holds Hopper's end-to-end suites: they build the hopper
// binary and run whole processes against a real PostgreSQL.
package tests
