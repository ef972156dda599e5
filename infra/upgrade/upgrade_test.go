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

func index(name, key string) map[string]any {
	return map[string]any{"IndexName": name, "KeySchema": []any{map[string]any{"AttributeName": key, "KeyType": "HASH"}},
		"Projection": map[string]any{"ProjectionType": "KEYS_ONLY"}}
}

// TestCheck: each change the check must catch, with the migration it
// says, and the changes it must let through.
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
		{"the table's logical id changed", func(res map[string]any) {
			for id, r := range res {
				if r.(map[string]any)["Type"] == "AWS::DynamoDB::Table" {
					res[id+"V2"] = r
					delete(res, id)
					return
				}
			}
		}, "the table is gone from the new template"},
		{"the mapping's starting position changed", func(res map[string]any) {
			props(res, "AWS::Lambda::EventSourceMapping")["StartingPosition"] = "LATEST"
		}, "StartingPosition changes, which replaces the mapping"},
		{"the stream's view changed", func(res map[string]any) {
			props(res, "AWS::DynamoDB::Table")["StreamSpecification"] = map[string]any{"StreamViewType": "NEW_IMAGE"}
		}, "its stream changes"},
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
