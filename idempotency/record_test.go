package idempotency

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func held(mut func(*Record)) *Record {
	k := &Record{Name: "k", Fingerprint: "f", Token: "t1", LeaseExpiresAt: now.Add(time.Minute), Claim: Request{Key: "ik", Fingerprint: "body1", RequestID: "r1"}}
	if mut != nil {
		mut(k)
	}
	return k
}

// outcome names what a classification returned.
func outcome(err error) string {
	var rej *Rejection
	var rep *Replay
	var unknown *unexplained
	switch {
	case errors.As(err, &rej):
		return string(rej.Code)
	case errors.As(err, &rep):
		return "replay"
	case errors.As(err, &unknown):
		return "unexplained"
	}
	return "?"
}

func TestClassifyClaim(t *testing.T) {
	completed := func(k *Record) { k.CompletedAt = now.Add(-time.Second) }
	for _, c := range []struct {
		name string
		old  *Record
		at   Claim
		want string
	}{
		{"other fingerprint while held", held(nil), Claim{Now: now, Fingerprint: "g"}, "fingerprint_mismatch"},
		{"other fingerprint once completed", held(completed), Claim{Now: now, Fingerprint: "g"}, "fingerprint_mismatch"},
		{"completed replays", held(completed), Claim{Now: now, Fingerprint: "f"}, "replay"},
		{"held by another", held(nil), Claim{Now: now, Fingerprint: "f", Request: Request{Key: "other", RequestID: "r2"}}, "in_progress"},
		{"held, no key", held(nil), Claim{Now: now, Fingerprint: "f", Request: Request{RequestID: "r2"}}, "in_progress"},
		{"own claim by key", held(nil), Claim{Now: now, Fingerprint: "f", Request: Request{Key: "ik", RequestID: "r9"}, Fingerprints: []string{"body1"}}, "replay"},
		{"own claim by SDK retry", held(nil), Claim{Now: now, Fingerprint: "f", Request: Request{RequestID: "r1"}, Fingerprints: []string{"body1"}}, "replay"},
		// The same key with another body (say another leaseSeconds) is not the
		// holder's retry: it must not get the live token.
		{"same key, other body", held(nil), Claim{Now: now, Fingerprint: "f", Request: Request{Key: "ik", RequestID: "r9"}, Fingerprints: []string{"body2"}}, "in_progress"},
		{"same request id, other body", held(nil), Claim{Now: now, Fingerprint: "f", Request: Request{RequestID: "r1"}, Fingerprints: []string{"body2"}}, "in_progress"},
		// A write applied whose answer was lost: its SDK retry finds its own token.
		{"own token (lost answer)", held(nil), Claim{Now: now, Fingerprint: "f", Token: "t1"}, "replay"},
		{"own token, other fingerprint", held(nil), Claim{Now: now, Fingerprint: "g", Token: "t1"}, "fingerprint_mismatch"},
		{"other token", held(nil), Claim{Now: now, Fingerprint: "f", Token: "t2"}, "in_progress"},
		{"own token after the lease lapsed", held(func(k *Record) { k.LeaseExpiresAt = now.Add(-time.Second) }), Claim{Now: now, Fingerprint: "f", Token: "t1"}, "unexplained"},
		{"claimable yet refused is a bug", held(func(k *Record) { k.Token = "" }), Claim{Now: now, Fingerprint: "f"}, "unexplained"},
		{"nothing there is a bug", nil, Claim{Now: now, Fingerprint: "f"}, "unexplained"},
	} {
		if got := outcome(ClassifyClaim(c.old, c.at)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestClassifyCompleteAndRelease(t *testing.T) {
	completed := held(func(k *Record) { k.CompletedAt = now })
	released := held(func(k *Record) { k.Token, k.ReleasedToken = "", "t1" })
	takenOver := held(func(k *Record) { k.Token = "t2" })
	releasedThenClaimed := held(func(k *Record) { k.Token, k.ReleasedToken = "t2", "t1" })
	releasedThenCompleted := held(func(k *Record) { k.Token, k.ReleasedToken, k.CompletedAt = "t2", "t1", now })
	neverReleased := held(func(k *Record) { k.Token = "" })
	for _, c := range []struct {
		name     string
		old      *Record
		token    string
		complete string
		release  string
	}{
		{"missing", nil, "t1", "key_not_found", "key_not_found"},
		{"completed by this token", completed, "t1", "replay", "key_completed"},
		{"completed by another", completed, "t0", "lease_lost", "key_completed"},
		{"released by this token", released, "t1", "lease_lost", "replay"},
		{"taken over", takenOver, "t1", "lease_lost", "lease_lost"},
		{"released by this token, claimed by another since", releasedThenClaimed, "t1", "lease_lost", "replay"},
		{"released by this token, completed by another since", releasedThenCompleted, "t1", "lease_lost", "replay"},
		{"released by another token, claimed since", releasedThenClaimed, "t0", "lease_lost", "lease_lost"},
		{"an empty token never replays a release", neverReleased, "", "unexplained", "unexplained"},
	} {
		if got := outcome(ClassifyComplete(c.old, c.token)); got != c.complete {
			t.Errorf("complete %s: %s, want %s", c.name, got, c.complete)
		}
		if got := outcome(ClassifyRelease(c.old, c.token)); got != c.release {
			t.Errorf("release %s: %s, want %s", c.name, got, c.release)
		}
	}
}

func TestStateAt(t *testing.T) {
	for _, c := range []struct {
		k    *Record
		want State
	}{
		{held(nil), StateInProgress},
		{held(func(k *Record) { k.LeaseExpiresAt = now }), StateLeaseExpired},
		{held(func(k *Record) { k.Token = "" }), StateFailed},
		{held(func(k *Record) { k.CompletedAt = now }), StateCompleted},
	} {
		if got := c.k.StateAt(now); got != c.want {
			t.Errorf("%+v: %s, want %s", c.k, got, c.want)
		}
	}
}

// TestFitError: a last error is printable and at most MaxErrorLen
// characters, whatever a failure's text holds (the service's tests check
// that its release route takes every fitted text).
func TestFitError(t *testing.T) {
	wide := strings.Repeat("𝄞", MaxErrorLen)
	for _, c := range []struct{ name, in, want string }{
		{"short", "card declined", "card declined"},
		{"control characters", "a\nb\tc\x00", "a b c "},
		{"bytes that are not UTF-8", "a\xff\xfeb", "a  b"},
		{"exactly the limit", wide, wide},
		{"over the limit, cut by characters", wide + "x", wide},
		{"100 KB", strings.Repeat("e", 100<<10), strings.Repeat("e", MaxErrorLen)},
	} {
		got := FitError(c.in)
		if got != c.want {
			t.Errorf("%s: %d characters %.30q, want %d %.30q", c.name, utf8.RuneCountInString(got), got, utf8.RuneCountInString(c.want), c.want)
		}
	}
}
