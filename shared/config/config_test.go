package config

import (
	"testing"
	"time"
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
