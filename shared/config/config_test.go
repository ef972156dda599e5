package config

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestLoad(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	c, err := Load(env(EnvTable, "t"))
	if err != nil || c.Retention != 720*time.Hour || c.KeyRetention != 24*time.Hour || c.ExpiryShards != 16 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	c, err = Load(env(EnvTable, "t", EnvRetention, "48h", EnvKeyRetain, "2h", EnvShards, "32"))
	if err != nil || c.Retention != 48*time.Hour || c.KeyRetention != 2*time.Hour || c.ExpiryShards != 32 {
		t.Fatalf("set: %+v %v", c, err)
	}
	for _, bad := range [][]string{
		{},
		{EnvTable, "t", EnvRetention, "soon"},
		{EnvTable, "t", EnvKeyRetain, "-1h"},
		{EnvTable, "t", EnvShards, "0"},
		{EnvTable, "t", EnvShards, "1001"},
	} {
		if _, err := Load(env(bad...)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestRetryerReplicatedWriteConflict: the SDK configuration every function
// (AWS) and the local server (Local) build their clients from retries an
// MRSC write conflict, and still what the standard retryer retries, and not
// a failed condition.
func TestRetryerReplicatedWriteConflict(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	cfg, err := AWS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]aws.Config{"AWS": cfg, "Local": Local("http://127.0.0.1:1")} {
		if c.Retryer == nil {
			t.Fatalf("%s: no retryer", name)
		}
		r := c.Retryer()
		for err, want := range map[error]bool{
			&types.ReplicatedWriteConflictException{Message: aws.String("another Region")}: true,
			&types.ProvisionedThroughputExceededException{}:                                true,
			&types.ConditionalCheckFailedException{}:                                       false,
		} {
			if got := r.IsErrorRetryable(err); got != want {
				t.Errorf("%s: %T retryable %v, want %v", name, err, got, want)
			}
		}
	}
}
