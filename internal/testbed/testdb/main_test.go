package testdb

import (
	"os"
	"testing"
)

// TestMain runs the package's own tests through Main, leak check included;
// or, run by TestRunDockerHelper, plays the dockerpg helper.
func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeHelperEnv); mode != "" {
		os.Exit(fakeDockerHelper(mode))
	}
	Main(m)
}
