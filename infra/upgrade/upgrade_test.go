package upgrade

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpgradeFromEveryRelease: a stack deployed from any released template
// (testdata/released) updates to the current one (the templates
// infra/exactonce pins, which TestSingleRegionTemplate keeps equal to what
// the tree synthesizes) without a problem CloudFormation or DynamoDB would
// have with it.
func TestUpgradeFromEveryRelease(t *testing.T) {
	releases, err := filepath.Glob("testdata/released/*/template-*.json")
	if err != nil || len(releases) == 0 {
		t.Fatalf("no released templates (%v)", err)
	}
	for _, old := range releases {
		cur := filepath.Join("..", "exactonce", "testdata", filepath.Base(old))
		from, err := Load(old)
		if err != nil {
			t.Fatal(err)
		}
		to, err := Load(cur)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range Check(from, to) {
			t.Errorf("upgrade from %s to %s: %s", old, cur, p)
		}
	}
}

func mutate(t *testing.T, change func(res map[string]any)) (*Template, *Template) {
	t.Helper()
	b, err := os.ReadFile("../exactonce/testdata/template-default.json")
	if err != nil {
		t.Fatal(err)
	}
	from, to := &Template{}, map[string]any{}
	_ = json.Unmarshal(b, from)
	_ = json.Unmarshal(b, &to)
	change(to["Resources"].(map[string]any))
	b, _ = json.Marshal(to)
	var t2 Template
	_ = json.Unmarshal(b, &t2)
	return from, &t2
}

func props(res map[string]any, typ string) map[string]any {
	for _, r := range res {
		if r.(map[string]any)["Type"] == typ {
			return r.(map[string]any)["Properties"].(map[string]any)
		}
	}
	return nil
}

// rename gives the resource of type typ another logical id.
func rename(res map[string]any, typ string) {
	for id, r := range res {
		if r.(map[string]any)["Type"] == typ {
			res[id+"V2"] = r
			delete(res, id)
			return
		}
	}
}

// setShards sets every function's EXACTONCE_EXPIRY_SHARDS.
func setShards(res map[string]any, n string) {
	for _, r := range res {
		p, _ := r.(map[string]any)["Properties"].(map[string]any)
		env, _ := p["Environment"].(map[string]any)
		if vars, ok := env["Variables"].(map[string]any); ok && vars["EXACTONCE_EXPIRY_SHARDS"] != nil {
			vars["EXACTONCE_EXPIRY_SHARDS"] = n
		}
	}
}

func index(name, key string) map[string]any {
	return map[string]any{"IndexName": name, "KeySchema": []any{map[string]any{"AttributeName": key, "KeyType": "HASH"}},
		"Projection": map[string]any{"ProjectionType": "KEYS_ONLY"}}
}

// TestCheck: each change the check must catch, with the migration it
// says, and the changes it must let through. (Fewer expiry shards, and the
// secret, the bus or the queue replaced, passed unseen before.)
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(res map[string]any)
		want   string // in the one problem ("" : none)
	}{
		{"nothing", func(map[string]any) {}, ""},
		{"one index added", func(res map[string]any) {
			p := props(res, "AWS::DynamoDB::Table")
			p["GlobalSecondaryIndexes"] = append(p["GlobalSecondaryIndexes"].([]any), index("byKind", "kind"))
		}, ""},
		{"two indexes added", func(res map[string]any) {
			p := props(res, "AWS::DynamoDB::Table")
			p["GlobalSecondaryIndexes"] = append(p["GlobalSecondaryIndexes"].([]any), index("byKind", "kind"), index("byTenant", "tenant"))
		}, "2 global secondary index changes in one update (create byKind, create byTenant)"},
		{"one index added, one deleted", func(res map[string]any) {
			p := props(res, "AWS::DynamoDB::Table")
			p["GlobalSecondaryIndexes"] = append(p["GlobalSecondaryIndexes"].([]any)[1:], index("byKind", "kind"))
		}, "deploy them as 2 releases"},
		{"an index's keys changed", func(res map[string]any) {
			p := props(res, "AWS::DynamoDB::Table")
			p["GlobalSecondaryIndexes"].([]any)[0] = index(p["GlobalSecondaryIndexes"].([]any)[0].(map[string]any)["IndexName"].(string), "other")
		}, "its keys or projection change"},
		{"the table's key changed", func(res map[string]any) {
			props(res, "AWS::DynamoDB::Table")["KeySchema"] = []any{map[string]any{"AttributeName": "pk", "KeyType": "HASH"}}
		}, "KeySchema changes, which replaces the table"},
		{"the table's logical id changed", func(res map[string]any) { rename(res, "AWS::DynamoDB::Table") }, "the table is gone from the new template"},
		{"the mapping's starting position changed", func(res map[string]any) {
			props(res, "AWS::Lambda::EventSourceMapping")["StartingPosition"] = "LATEST"
		}, "StartingPosition changes, which replaces the mapping"},
		{"the stream's view changed", func(res map[string]any) {
			props(res, "AWS::DynamoDB::Table")["StreamSpecification"] = map[string]any{"StreamViewType": "NEW_IMAGE"}
		}, "its stream changes"},
		{"fewer expiry shards", func(res map[string]any) { setShards(res, "4") }, "expiry shards go from 16 to 4"},
		{"more expiry shards", func(res map[string]any) { setShards(res, "32") }, ""},
		{"the secret's logical id changed", func(res map[string]any) { rename(res, "AWS::SecretsManager::Secret") }, "the server secret is gone"},
		{"the secret's generation changed", func(res map[string]any) {
			props(res, "AWS::SecretsManager::Secret")["GenerateSecretString"] = map[string]any{"ExcludePunctuation": true, "PasswordLength": 65}
		}, "GenerateSecretString of the server secret changes"},
		{"the bus's name changed", func(res map[string]any) { props(res, "AWS::Events::EventBus")["Name"] = "other" }, "Name of the event bus changes"},
		{"the on-failure queue's logical id changed", func(res map[string]any) { rename(res, "AWS::SQS::Queue") }, "the queue is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := mutate(t, tc.change)
			got := Check(from, to)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("problems %v, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].String(), tc.want)):
				t.Fatalf("problems %v, want one saying %q", got, tc.want)
			case tc.want != "":
				t.Logf("%s", got[0])
			}
		})
	}
}
