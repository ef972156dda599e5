package exactonce

import (
	"strings"
	"testing"
)

// TestSweeper: a rule runs the sweeper every minute; it may only Query the
// expiry index and UpdateItem the table (TestLeastPrivilege), and every
// function that writes actions agrees on the shard count.
func TestSweeper(t *testing.T) {
	_, tmpl := synth(t, Props{ExpiryShards: 32})
	var sweeperArn string
	envs := map[string]string{}
	for id, fn := range resources(tmpl, "AWS::Lambda::Function") {
		name := strings.TrimPrefix(props(fn)["Description"].(string), "ExactOnce ")
		envs[name] = jsonOf(props(fn)["Environment"])
		if name == "sweeper" {
			sweeperArn = id
			if props(fn)["Timeout"] != 60.0 {
				t.Errorf("sweeper timeout %v", props(fn)["Timeout"])
			}
		}
	}
	for _, name := range []string{"create", "consume", "cancel", "sweeper"} {
		if !strings.Contains(envs[name], `"EXACTONCE_EXPIRY_SHARDS":"32"`) || !strings.Contains(envs[name], `"TABLE_NAME"`) {
			t.Errorf("%s environment: %s", name, envs[name])
		}
	}
	var schedule map[string]any
	for id, r := range resources(tmpl, "AWS::Events::Rule") {
		if strings.HasPrefix(id, "SweepSchedule") {
			schedule = props(r)
		}
	}
	if schedule == nil || schedule["ScheduleExpression"] != "rate(1 minute)" || schedule["State"] != "ENABLED" ||
		!strings.Contains(jsonOf(schedule["Targets"]), sweeperArn) {
		t.Errorf("schedule: %s", jsonOf(schedule))
	}
	_, tmpl = synth(t, Props{})
	if !strings.Contains(jsonOf(tmpl), `"EXACTONCE_EXPIRY_SHARDS":"16"`) {
		t.Error("default shard count not 16")
	}
}
