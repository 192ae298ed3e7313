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

// A failing loop waits longer after each failure in a row, up to 5s.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	require.Equal(t, 200*time.Millisecond, RetryDelay(1))
	require.Equal(t, 400*time.Millisecond, RetryDelay(2))
	prev := time.Duration(0)
	for n := 1; n < 100; n++ {
		d := RetryDelay(n)
		require.GreaterOrEqual(t, d, prev)
		require.LessOrEqual(t, d, 5*time.Second)
		prev = d
	}
	require.Equal(t, 5*time.Second, RetryDelay(99))
}
