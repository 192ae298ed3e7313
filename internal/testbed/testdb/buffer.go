package testdb

import (
	"strings"
	"sync"
)

// Buffer collects what goroutines or a child process write (logs, output)
// while the test reads it. The zero value is ready to use.
type Buffer struct {
	mu   sync.Mutex
	text strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.text.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.text.String()
}
