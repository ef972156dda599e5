package server_test

import (
	"context"
	"errors"
	"testing"

	"github.com/exactonce/exactonce/client"
	"github.com/exactonce/exactonce/internal/testkit"
)

// TestUses: the licence example through the typed client, every call
// losing its first answer after the server acted: a retried take is never
// a second use, a retried release answers the first release.
func TestUses(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t)
	c := newClient(env, &transport{after: firstAttemptOf()})
	ctx := context.Background()
	if _, err := c.CreateAction(ctx, client.CreateInput{ActionID: "lic", UserID: "acme", MaxUses: 3, Releasable: true, Payload: "K-1"}); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"laptop", "phone", "tablet"} {
		a, err := c.TakeUse(ctx, "lic", dev, "activate")
		if err != nil || a.UseID != dev || a.UsedAt == nil || a.UsesHeld != nil || *a.MaxUses != 3 || string(a.Payload) != `"K-1"` {
			t.Fatalf("take %s: %+v %v", dev, a, err)
		}
	}
	_, err := c.TakeUse(ctx, "lic", "desktop", "")
	var e *client.Error
	if !errors.Is(err, client.ErrNoUsesLeft) || !errors.As(err, &e) || e.MaxUses == nil || *e.MaxUses != 3 {
		t.Fatalf("fourth device: %v", err)
	}
	r, err := c.ReleaseUse(ctx, "lic", "phone")
	if err != nil || r.UseID != "phone" || r.ReleasedAt.IsZero() || !r.Replayed {
		t.Fatalf("release (first answer lost, so the retry's is a replay): %+v %v", r, err)
	}
	if a, err := c.TakeUse(ctx, "lic", "desktop", ""); err != nil || a.UseID != "desktop" {
		t.Fatalf("desktop after the release: %+v %v", a, err)
	}
	if _, err := c.ReleaseUse(ctx, "lic", "nobody"); !errors.Is(err, client.ErrUseNotFound) {
		t.Fatalf("release of nobody: %v", err)
	}
	p, err := c.ListUses(ctx, "lic", "", 2)
	if err != nil || len(p.Uses) != 2 || p.Uses[0].UseID != "desktop" || p.Uses[1].UseID != "laptop" || p.Cursor == "" {
		t.Fatalf("page 1: %+v %v", p, err)
	}
	if p, err = c.ListUses(ctx, "lic", p.Cursor, 2); err != nil || len(p.Uses) != 1 || p.Uses[0].UseID != "tablet" || p.Cursor != "" {
		t.Fatalf("page 2: %+v %v", p, err)
	}
	if g, err := c.GetAction(ctx, "lic"); err != nil || *g.UsesHeld != 3 || *g.MaxUses != 3 || !g.Releasable {
		t.Fatalf("get: %+v %v", g, err)
	}
	if _, err := c.CreateAction(ctx, client.CreateInput{ActionID: "coupon", UserID: "shop", MaxUses: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReleaseUse(ctx, "coupon", "x"); !errors.Is(err, client.ErrNotReleasable) {
		t.Fatalf("release on a coupon: %v", err)
	}
}
