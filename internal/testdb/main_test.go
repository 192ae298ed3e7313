package testdb

import "testing"

// TestMain runs the package's own tests through Main, leak check included.
func TestMain(m *testing.M) { Main(m) }
