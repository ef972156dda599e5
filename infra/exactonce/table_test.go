package exactonce

import "testing"

func TestTable(t *testing.T) {
	_, tmpl := synth(t, Props{})
	tables := resources(tmpl, "AWS::DynamoDB::Table")
	if len(tables) != 1 {
		t.Fatalf("%d tables", len(tables))
	}
	for _, tbl := range tables {
		p := props(tbl)
		for k, want := range map[string]string{
			"KeySchema":                        `[{"AttributeName":"actionId","KeyType":"HASH"}]`,
			"AttributeDefinitions":             `[{"AttributeName":"actionId","AttributeType":"S"},{"AttributeName":"expShard","AttributeType":"S"},{"AttributeName":"expiresAtMs","AttributeType":"N"},{"AttributeName":"userKey","AttributeType":"S"},{"AttributeName":"createdAtMs","AttributeType":"N"}]`,
			"GlobalSecondaryIndexes":           `[{"IndexName":"byExpiry","KeySchema":[{"AttributeName":"expShard","KeyType":"HASH"},{"AttributeName":"expiresAtMs","KeyType":"RANGE"}],"Projection":{"ProjectionType":"KEYS_ONLY"}},{"IndexName":"byUser","KeySchema":[{"AttributeName":"userKey","KeyType":"HASH"},{"AttributeName":"createdAtMs","KeyType":"RANGE"}],"Projection":{"ProjectionType":"KEYS_ONLY"}}]`,
			"BillingMode":                      `"PAY_PER_REQUEST"`,
			"TimeToLiveSpecification":          `{"AttributeName":"ttl","Enabled":true}`,
			"PointInTimeRecoverySpecification": `{"PointInTimeRecoveryEnabled":true}`,
			"StreamSpecification":              `{"StreamViewType":"NEW_AND_OLD_IMAGES"}`,
			"SSESpecification":                 `{"SSEEnabled":true}`,
			"DeletionProtectionEnabled":        `true`,
		} {
			if got := jsonOf(p[k]); got != want {
				t.Errorf("%s = %s, want %s", k, got, want)
			}
		}
		if tbl["DeletionPolicy"] != "Retain" || tbl["UpdateReplacePolicy"] != "Retain" {
			t.Errorf("table policies %v/%v, want Retain", tbl["DeletionPolicy"], tbl["UpdateReplacePolicy"])
		}
	}
	_, tmpl = synth(t, Props{Throwaway: true})
	for _, tbl := range resources(tmpl, "AWS::DynamoDB::Table") {
		if props(tbl)["DeletionProtectionEnabled"] != false || tbl["DeletionPolicy"] != "Delete" {
			t.Errorf("throwaway table: protection %v, policy %v", props(tbl)["DeletionProtectionEnabled"], tbl["DeletionPolicy"])
		}
	}
}
