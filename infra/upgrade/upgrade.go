// Package upgrade checks that a stack deployed from one template can be
// updated to another by CloudFormation without what it would refuse or do
// silently: more than one global secondary index created or deleted per
// table in one update (DynamoDB takes one at a time, so the update fails and
// rolls back), a table replaced (a new, empty table), a stream's event
// source mapping replaced (a new mapping starts over at its starting
// position), the server secret, the event bus or a queue replaced (a new
// secret value, a bus without the subscribers' rules, an empty queue), and
// fewer expiry shards (the sweeper would skip the others). Each problem says
// the migration to do instead.
package upgrade

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Problem is one change an update cannot make as it stands.
type Problem struct {
	Resource  string // logical id
	Change    string // what changes
	Migration string // what to do instead
}

func (p Problem) String() string {
	return fmt.Sprintf("%s: %s. Migration: %s", p.Resource, p.Change, p.Migration)
}

// Template is a CloudFormation template's resources.
type Template struct {
	Resources map[string]struct {
		Type       string         `json:"Type"`
		Properties map[string]any `json:"Properties"`
	} `json:"Resources"`
}

// Load reads a template file.
func Load(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &t, nil
}

var tableTypes = map[string]bool{"AWS::DynamoDB::Table": true, "AWS::DynamoDB::GlobalTable": true}

// Replacement properties (CloudFormation's "Update requires: Replacement").
var tableReplacing = []string{"TableName", "KeySchema", "LocalSecondaryIndexes"}
var mappingReplacing = []string{"EventSourceArn", "StartingPosition", "StartingPositionTimestamp"}

// kept are the other resources whose replacement loses what they hold:
// what each is, what a replacement does, and the properties whose change
// replaces it (the secret's GenerateSecretString: generates a new value).
var kept = map[string]struct {
	what, loss string
	replacing  []string
}{
	"AWS::SecretsManager::Secret": {"the server secret", "a new secret value: no PIN hash or sealed payload made with the old one can be checked or opened again",
		[]string{"Name", "GenerateSecretString"}},
	"AWS::Events::EventBus": {"the event bus", "a new bus: subscribers' rules stay on the old one and get no more events", []string{"Name"}},
	"AWS::SQS::Queue":       {"the queue", "a new, empty queue: the records set aside on the old one are deleted with it", []string{"QueueName", "FifoQueue"}},
}

// Check lists what updating a stack from template from to template to would
// fail on or replace.
func Check(from, to *Template) []Problem {
	var out []Problem
	if o, n := expiryShards(from), expiryShards(to); n < o {
		out = append(out, Problem{"EXACTONCE_EXPIRY_SHARDS", fmt.Sprintf("the functions' expiry shards go from %d to %d: the sweeper then reads shards 0-%d only, so an open action in another is never marked expired (its action.expired waits for TTL)", o, n, n-1),
			fmt.Sprintf("keep exactonce:expiryShards (Props.ExpiryShards) at %d or more: on a live table the count is only ever raised", o)})
	}
	ids := make([]string, 0, len(from.Resources))
	for id := range from.Resources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		old := from.Resources[id]
		cur, ok := to.Resources[id]
		switch {
		case tableTypes[old.Type]:
			if !ok || cur.Type != old.Type {
				out = append(out, Problem{id, "the table is gone from the new template (its logical id or type changed): CloudFormation deletes it and creates another, empty",
					"keep the table's logical id and type (the construct's StackLogicalIds for a stack deployed by infra/); a table that must change type or key is migrated by a new table beside the old, a copy (export to S3 and import, or a scan and batch write), then a switch"})
				continue
			}
			for _, k := range tableReplacing {
				if !reflect.DeepEqual(old.Properties[k], cur.Properties[k]) {
					out = append(out, Problem{id, fmt.Sprintf("%s changes, which replaces the table: a new, empty one", k),
						"leave " + k + " as it is; to change it, create a second table, copy the items, then move the functions to it in a later release"})
				}
			}
			if !reflect.DeepEqual(streamView(old.Properties), streamView(cur.Properties)) {
				out = append(out, Problem{id, fmt.Sprintf("its stream changes (%v → %v): the table gets a new stream, and the publisher's mapping starts over on it", streamView(old.Properties), streamView(cur.Properties)),
					"keep StreamViewType NEW_AND_OLD_IMAGES; a stream change needs the mapping drained first (no writes, iterator age 0), then the change, then republish of the window"})
			}
			created, deleted, changed := indexChanges(old.Properties, cur.Properties)
			if n := len(created) + len(deleted) + 2*len(changed); n > 1 {
				var steps []string
				for _, x := range deleted {
					steps = append(steps, "delete "+x)
				}
				for _, x := range changed {
					steps = append(steps, "delete "+x+" (its keys or projection change)", "create "+x+" anew")
				}
				for _, x := range created {
					steps = append(steps, "create "+x)
				}
				out = append(out, Problem{id, fmt.Sprintf("%d global secondary index changes in one update (%s); DynamoDB creates or deletes one per table update, so CloudFormation fails and rolls back",
					n, strings.Join(steps, ", ")),
					fmt.Sprintf("deploy them as %d releases, one index change each, each deployed (the index ACTIVE) before the next: %s", n, strings.Join(steps, "; then "))})
			}
		case kept[old.Type].what != "":
			k := kept[old.Type]
			if !ok || cur.Type != old.Type {
				out = append(out, Problem{id, k.what + " is gone from the new template (its logical id or type changed): CloudFormation deletes it and creates " + k.loss,
					"keep its logical id (the construct's StackLogicalIds for a stack deployed by infra/)"})
				continue
			}
			for _, p := range k.replacing {
				if !reflect.DeepEqual(old.Properties[p], cur.Properties[p]) {
					out = append(out, Problem{id, fmt.Sprintf("%s of %s changes, which gives %s", p, k.what, k.loss), "leave " + p + " as it is"})
				}
			}
		case old.Type == "AWS::Lambda::EventSourceMapping":
			if !ok || cur.Type != old.Type {
				out = append(out, Problem{id, "the event source mapping is gone from the new template (its logical id changed): a new mapping reads the stream from its StartingPosition",
					"keep the mapping's logical id; if it must change, stop writes until the old mapping's iterator age is 0, deploy, then republish the window of the switch (subscribers de-duplicate by event id)"})
				continue
			}
			for _, k := range mappingReplacing {
				if !reflect.DeepEqual(old.Properties[k], cur.Properties[k]) {
					out = append(out, Problem{id, fmt.Sprintf("%s changes, which replaces the mapping: the new one reads the stream from its StartingPosition (TRIM_HORIZON: up to 24 hours of events again; LATEST: the events of the switch lost)", k),
						"keep " + k + "; if it must change, stop writes until the iterator age is 0, deploy, then republish the window of the switch"})
				}
			}
		}
	}
	return out
}

// expiryShards is the largest EXACTONCE_EXPIRY_SHARDS a function of t
// has (0 with none).
func expiryShards(t *Template) int {
	n := 0
	for _, r := range t.Resources {
		env, _ := r.Properties["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		if v, ok := vars["EXACTONCE_EXPIRY_SHARDS"].(string); ok {
			if k, err := strconv.Atoi(v); err == nil {
				n = max(n, k)
			}
		}
	}
	return n
}

func streamView(p map[string]any) any {
	if ss, ok := p["StreamSpecification"].(map[string]any); ok {
		return ss["StreamViewType"]
	}
	return nil
}

// indexChanges compares two tables' global secondary indexes by name.
func indexChanges(old, cur map[string]any) (created, deleted, changed []string) {
	o, c := indexes(old), indexes(cur)
	for name, ix := range c {
		prev, ok := o[name]
		switch {
		case !ok:
			created = append(created, name)
		case !reflect.DeepEqual(prev["KeySchema"], ix["KeySchema"]) || !reflect.DeepEqual(prev["Projection"], ix["Projection"]):
			changed = append(changed, name)
		}
	}
	for name := range o {
		if _, ok := c[name]; !ok {
			deleted = append(deleted, name)
		}
	}
	sort.Strings(created)
	sort.Strings(deleted)
	sort.Strings(changed)
	return created, deleted, changed
}

func indexes(p map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	list, _ := p["GlobalSecondaryIndexes"].([]any)
	for _, x := range list {
		m, _ := x.(map[string]any)
		name, _ := m["IndexName"].(string)
		out[name] = m
	}
	return out
}
