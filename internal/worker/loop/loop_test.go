package loop

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every periodic service waits a jittered interval before each pass (never
// at once, within ±25%), and returns once its context ends, mid-wait.
func TestEvery(t *testing.T) {
	t.Parallel()
	for range 1000 {
		d := Jittered(time.Second)
		require.GreaterOrEqual(t, d, 750*time.Millisecond)
		require.Less(t, d, 1250*time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	passes := make(chan struct{}, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func(context.Context) { passes <- struct{}{} })
	}()
	for range 3 {
		<-passes
	}
	cancel()
	<-done
	stopped := len(passes)
	Every(ctx, time.Millisecond, func(context.Context) { t.Fatal("a pass after the context ended") })
	require.Equal(t, stopped, len(passes))
}
