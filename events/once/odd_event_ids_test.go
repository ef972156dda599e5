package once_test

import (
	"context"
	"testing"
)

// TestEventIDsThatAreNotUTF8NeverMerge: Do "runs fn unless the event id was
// already handled", so different event ids are different events. A
// DynamoDB string is UTF-8 and the SDK writes each byte that is not as
// U+FFFD, so ids that differ only in such bytes, and the valid id with
// U+FFFD in their place, would name one claim: every one after the first
// would be acknowledged (ran=false, err=nil) without its handler running, a
// silent drop. An id that is not UTF-8 is refused with an error instead (an
// id from events.Parse always is UTF-8; ExactOnce's are hex), and the valid
// one runs.
func TestEventIDsThatAreNotUTF8NeverMerge(t *testing.T) {
	g, _, _ := newGuard(t)
	ctx := context.Background()
	ids := []string{"ev-\xff", "ev-\xfe", "ev-\uFFFD"}
	runs := make([]int, len(ids))
	for i, id := range ids {
		ran, err := g.Do(ctx, id, func(context.Context) error { runs[i]++; return nil })
		t.Logf("id %+q: ran=%v err=%v", id, ran, err)
		if err == nil && !ran {
			t.Errorf("id %+q was acknowledged without its handler running (runs so far %v)", id, runs)
		}
	}
	if runs[0] != 0 || runs[1] != 0 || runs[2] != 1 {
		t.Errorf("handler runs per id %+q: %v, want [0 0 1] (ids that are not UTF-8 refused, the valid one run once)", ids, runs)
	}
}
