package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/internal/testkit"
)

// TestKeyStoreLongReasonThenLargestResponse: the hosted keys path of
// issue 30's library double effect. The API refuses a release error over
// 1024 characters and the KeyStore fits the reason to it, so a 100 KB
// error's text leaves room for the largest response the API takes: the
// effect runs once, is stored and replayed.
func TestKeyStoreLongReasonThenLargestResponse(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	store := newClient(env, &transport{}).KeyStore()
	ctx := context.Background()
	call := idempotency.Call{
		Key: "hosted-long-reason", Fingerprint: "fp", Lease: time.Minute,
		Reason: func(err error) string { return err.Error() },
	}
	longErr := errors.New("declined: " + strings.Repeat("𝄞", 100<<10))
	if _, err := idempotency.Run(ctx, store, call, func(context.Context) ([]byte, error) { return nil, longErr }); !errors.Is(err, longErr) {
		t.Fatalf("failing attempt: %v", err)
	}
	response := []byte(`"` + strings.Repeat("r", store.MaxResponseBytes()-2) + `"`)
	effects := 0
	for i := range 2 {
		res, err := idempotency.Run(ctx, store, call, func(context.Context) ([]byte, error) { effects++; return response, nil })
		if err != nil || len(res.Response) != len(response) || res.Replayed != (i > 0) {
			t.Fatalf("call %d: %d bytes, replayed %v, %v", i, len(res.Response), res.Replayed, err)
		}
	}
	if effects != 1 {
		t.Fatalf("the effect ran %d times, want 1", effects)
	}
	k, err := store.Claim(ctx, call.Key, idempotency.Claim{Now: time.Now(), Fingerprint: "fp", Lease: time.Second})
	var replay *idempotency.Replay
	if !errors.As(err, &replay) || utf8.RuneCountInString(replay.Key.LastError) != idempotency.MaxErrorLen {
		t.Fatalf("the completed key: %+v %v, want a replay keeping a last error of %d characters", k, err, idempotency.MaxErrorLen)
	}
}
