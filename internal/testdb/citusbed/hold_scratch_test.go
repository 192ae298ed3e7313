package citusbed

import (
	"os"
	"testing"
	"time"
)

func TestHoldScratch(t *testing.T) {
	if os.Getenv("HOLD") == "" {
		t.Skip()
	}
	f := New(t)
	os.WriteFile("/tmp/citus-url", []byte(f.URL()), 0o644)
	for {
		if _, err := os.Stat("/tmp/citus-hold"); err != nil {
			return
		}
		time.Sleep(time.Second)
	}
}
