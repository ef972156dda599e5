package sweep_test

import (
	"context"
	"testing"
	"time"

	"github.com/exactonce/exactonce/internal/testkit"
	"github.com/exactonce/exactonce/local/server"
	"github.com/exactonce/exactonce/shared/action"
)

// TestManyShardsKeepTheirWatermarks: EXACTONCE_EXPIRY_SHARDS may be up to
// 1,000. A sweep over a table whose due actions fall in most of them
// raises their watermarks. Before the fix one write raised them all, and
// past about 80 shards its condition was over DynamoDB's 4 KB: every run
// failed and read every entry again.
func TestManyShardsKeepTheirWatermarks(t *testing.T) {
	t.Parallel()
	const shards = 100
	env := testkit.NewEnv(t, func(o *server.Options) { o.ExpiryShards = shards })
	st := env.Sweeper.Store
	base := action.Millis(time.Now().Add(time.Hour))
	n := 1500
	createMany(t, st, "w", n, func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) })
	env.Sweeper.Now = func() time.Time { return base.Add(time.Minute) }
	r, err := env.Sweeper.Run(context.Background())
	t.Logf("first sweep: %+v err %v", r, err)
	marks, _ := st.Watermarks(context.Background())
	raised := 0
	for _, m := range marks {
		if m > 0 {
			raised++
		}
	}
	env.Sweeper.Now = func() time.Time { return base.Add(2 * time.Minute) }
	r2, err2 := env.Sweeper.Run(context.Background())
	t.Logf("second sweep: %+v err %v", r2, err2)
	if err != nil || raised == 0 || r2.Due > n/4 {
		t.Fatalf("%d of %d shards' watermarks raised (err %v); the next sweep read %d entries again (of %d)", raised, shards, err, r2.Due, n)
	}
}
