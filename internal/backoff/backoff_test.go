package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRetryStopsWhenDone(t *testing.T) {
	calls := 0
	err := Retry(context.Background(), 5, time.Millisecond, func(context.Context) (bool, error) {
		calls++
		return calls == 3, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Retry = %v after %d calls, want nil after 3", err, calls)
	}
}

func TestRetryGivesUpAfterItsAttempts(t *testing.T) {
	calls := 0
	err := Retry(context.Background(), 4, time.Millisecond, func(context.Context) (bool, error) { calls++; return false, nil })
	if !errors.Is(err, ErrExhausted) || calls != 4 {
		t.Fatalf("Retry = %v after %d calls, want ErrExhausted after 4", err, calls)
	}
}

func TestRetryReturnsTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	err := Retry(context.Background(), 4, time.Millisecond, func(context.Context) (bool, error) { calls++; return false, boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("Retry = %v after %d calls, want boom after 1", err, calls)
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("Sleep on a canceled context = %v after %s", err, time.Since(start))
	}
}
