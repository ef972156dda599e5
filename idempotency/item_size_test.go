package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/exactonce/exactonce/idempotency"
	"github.com/exactonce/exactonce/idempotency/dynamostore"
)

// TestLongFailureReasonKeepsResponseStorable: a release stores the failure's
// reason on the key and a later claim keeps it, so an unbounded reason (a
// 100 KB error's text) left too little room for a 300 KB response, well
// under MaxResponseBytes: the complete was refused, the key was neither
// completed nor held, and the retry after the lease ran the effect again.
// Whatever the reason, the accepted response is stored and replayed.
func TestLongFailureReasonKeepsResponseStorable(t *testing.T) {
	table, _ := newTable(t)
	clk := newClock()
	ctx := context.Background()
	call := idempotency.Call{
		Key: "charge-1", Fingerprint: "fp", Lease: time.Second, Now: clk.Now,
		Reason: func(err error) string { return err.Error() },
	}
	longErr := errors.New("declined: " + strings.Repeat("e", 100<<10))
	if _, err := idempotency.Run(ctx, table, call, func(context.Context) ([]byte, error) { return nil, longErr }); !errors.Is(err, longErr) {
		t.Fatalf("failing attempt: %v", err)
	}
	response := []byte(`"` + strings.Repeat("r", 300<<10) + `"`)
	effects := 0
	charge := func(context.Context) ([]byte, error) { effects++; return response, nil }
	var errs []error
	for range 3 {
		res, err := idempotency.Run(ctx, table, call, charge)
		errs = append(errs, err)
		if err == nil && len(res.Response) != len(response) {
			t.Errorf("response of %d bytes, want %d", len(res.Response), len(response))
		}
		clk.Advance(2 * time.Second) // past the lease
	}
	t.Logf("effects after a 100 KB reason and a 300 KB response: %d (errors %v)", effects, errs)
	if effects != 1 || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("the effect ran %d times, want 1 and a stored response (errors %v)", effects, errs)
	}
	k, err := table.Get(ctx, "charge-1", clk.Now())
	if err != nil || k.CompletedAt.IsZero() || len(k.LastError) > 4*1024 || !strings.HasPrefix(k.LastError, "declined: eee") {
		t.Fatalf("key: completed %v, last error of %d bytes (%.20q), %v", k.CompletedAt, len(k.LastError), k.LastError, err)
	}
}

// TestLongFingerprintRefusedBeforeEffect: a claim stores the call's
// fingerprint, so an unbounded one (100 KB) left too little room for a
// 300 KB response: the effect ran, the complete was refused and the retry
// after the lease ran it again. A fingerprint over the library's limit is
// refused before the claim: the effect never runs and nothing is written.
func TestLongFingerprintRefusedBeforeEffect(t *testing.T) {
	table, counter := newTable(t)
	clk := newClock()
	call := idempotency.Call{Key: "charge-2", Fingerprint: strings.Repeat("f", 100<<10), Lease: time.Second, Now: clk.Now}
	effects := 0
	charge := func(context.Context) ([]byte, error) {
		effects++
		return []byte(`"` + strings.Repeat("r", 300<<10) + `"`), nil
	}
	var errs []error
	for range 2 {
		_, err := idempotency.Run(context.Background(), table, call, charge)
		errs = append(errs, err)
		clk.Advance(2 * time.Second)
	}
	t.Logf("effects with a 100 KB fingerprint and a 300 KB response: %d (errors %v)", effects, errs)
	if effects != 0 || errs[0] == nil || !strings.Contains(errs[0].Error(), "fingerprint") {
		t.Fatalf("effects %d (errors %v), want none and an error naming the fingerprint", effects, errs)
	}
	if n := counter.Take(); len(n) != 0 {
		t.Errorf("requests %v, want none", n)
	}
}

// TestLargestKeyItemFits: every attribute a key item carries besides the
// response at its largest (a 255-byte partition key name, a 2048-byte
// partition key, fingerprint and claim fields of the most characters of
// the most bytes, a release's reason fitted from 100 KB) still leaves room
// for a response of MaxResponseBytes: the complete is stored and read back.
// Longer fields are refused by the claim (no write), or fitted by the
// release and hold.
func TestLargestKeyItemFits(t *testing.T) {
	needDynamoDB(t)
	ctx := context.Background()
	pk := strings.Repeat("p", 255)
	name := "idem-largest"
	if err := dynamostore.CreateTable(ctx, localDynamoDB(), name, pk); err != nil {
		t.Fatal(err)
	}
	wide := func(chars int) string { return strings.Repeat("𝄞", chars) } // 4 bytes a character
	prefix := wide(100)
	table := &dynamostore.Table{DB: localDynamoDB(), Name: name, PartitionKey: pk, Prefix: prefix}
	key := strings.Repeat("k", 2048-len(prefix))
	now := time.Now()
	claim := idempotency.Claim{
		Now: now, Fingerprint: wide(idempotency.MaxFingerprintLen), Lease: time.Minute,
		Request: idempotency.Request{Key: wide(idempotency.MaxFingerprintLen), Fingerprint: wide(idempotency.MaxFingerprintLen), RequestID: wide(idempotency.MaxFingerprintLen)},
	}
	claim.Token = idempotency.NewToken()
	if _, err := table.Claim(ctx, key, claim); err != nil {
		t.Fatalf("claim: %v", err)
	}
	k, err := table.Release(ctx, key, claim.Token, "declined\n"+wide(100<<10), now)
	if err != nil {
		t.Fatalf("release with a 400 KB reason: %v", err)
	}
	if utf8.RuneCountInString(k.LastError) != idempotency.MaxErrorLen || !strings.HasPrefix(k.LastError, "declined 𝄞") {
		t.Fatalf("release: a last error of %d characters %.20q, want %d", utf8.RuneCountInString(k.LastError), k.LastError, idempotency.MaxErrorLen)
	}
	claim.Token, claim.Now = idempotency.NewToken(), now.Add(time.Second)
	if _, err := table.Claim(ctx, key, claim); err != nil {
		t.Fatalf("claim again: %v", err)
	}
	response := []byte(`"` + strings.Repeat("r", idempotency.MaxResponseBytes-2) + `"`)
	// A Replay is this same complete, applied, its answer lost and the SDK
	// re-sending it (seen on a busy machine, where a 400 KB write is slow).
	var replay *idempotency.Replay
	if _, err := table.Complete(ctx, key, claim.Token, response, claim.Now); err != nil && !errors.As(err, &replay) {
		t.Fatalf("complete with a response of MaxResponseBytes: %v", err)
	}
	if k, err := table.Get(ctx, key, claim.Now); err != nil || len(k.Response) != idempotency.MaxResponseBytes {
		t.Fatalf("read back: %v", err)
	}

	for _, c := range []struct {
		field string
		edit  func(*idempotency.Claim)
	}{
		{"fingerprint", func(c *idempotency.Claim) { c.Fingerprint = wide(idempotency.MaxFingerprintLen + 1) }},
		{"claimKey", func(c *idempotency.Claim) { c.Request.Key = wide(idempotency.MaxFingerprintLen + 1) }},
		{"claimFingerprint", func(c *idempotency.Claim) { c.Request.Fingerprint = wide(idempotency.MaxFingerprintLen + 1) }},
		{"claimRequestId", func(c *idempotency.Claim) { c.Request.RequestID = wide(idempotency.MaxFingerprintLen + 1) }},
	} {
		over := claim
		over.Token = idempotency.NewToken()
		c.edit(&over)
		if _, err := table.Claim(ctx, "over-"+c.field, over); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("a claim with a %s over the limit: %v, want an error naming it", c.field, err)
		}
		if _, err := table.Get(ctx, "over-"+c.field, now); err == nil {
			t.Errorf("a claim with a %s over the limit wrote the key", c.field)
		}
	}
}
