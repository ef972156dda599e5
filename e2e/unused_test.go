package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/exactonce/exactonce/e2e/template"
)

// TestUnusedListAbsentFunction: a reviewed entry of a function the template
// does not have (the example subscriber's, on a plain `make synth`) is not
// an error; an entry of a function the template has whose statement is
// gone, or was used, still is, as is a "*" entry no function matches.
func TestUnusedListAbsentFunction(t *testing.T) {
	stmt := func(id string, actions ...any) template.Statement {
		return template.Statement{ID: id, Doc: map[string]any{"Effect": "Allow", "Action": actions}}
	}
	functions := map[string]*template.Function{
		"publisher": {Statements: []template.Statement{stmt("p0", "dynamodb:ListStreams"), stmt("p1", "events:PutEvents"), stmt("p2", "logs:CreateLogStream", "logs:PutLogEvents")}},
		"create":    {Statements: []template.Statement{stmt("c0", "dynamodb:UpdateItem"), stmt("c1", "logs:PutLogEvents", "logs:CreateLogStream"), stmt("c2", "kms:Decrypt")}},
	}
	used := map[string]int{"p1": 3, "c0": 5}
	listed := map[string]string{
		"* logs:CreateLogStream,logs:PutLogEvents":                     "the Lambda service",
		"publisher dynamodb:ListStreams":                               "the event source mapping",
		"audit sqs:GetQueueAttributes,sqs:GetQueueUrl,sqs:SendMessage": "the example subscriber's destination",
		"publisher events:PutEvents":                                   "used: stale",
		"create sqs:SendMessage":                                       "gone: stale",
		"* s3:GetObject":                                               "no function has it: stale",
	}
	j := judgeUnused(functions, used, listed)
	if !slices.Equal(j.Absent, []string{"audit sqs:GetQueueAttributes,sqs:GetQueueUrl,sqs:SendMessage"}) {
		t.Errorf("absent %v, want the audit entry only", j.Absent)
	}
	if want := []string{"* s3:GetObject", "create sqs:SendMessage", "publisher events:PutEvents"}; !slices.Equal(j.Stale, want) {
		t.Errorf("stale %v, want %v", j.Stale, want)
	}
	if want := []string{"create kms:Decrypt (c2): no call used it"}; !slices.Equal(j.Unused, want) || j.Listed != 3 {
		t.Errorf("unused %v, listed %d; want %v and 3 listed", j.Unused, j.Listed, want)
	}
}

// TestUnusedListReads: every entry of e2e/unused.txt gives its reason, and a
// line without one is an error naming the line.
func TestUnusedListReads(t *testing.T) {
	listed, err := readUnused("unused.txt")
	if err != nil || len(listed) == 0 {
		t.Fatalf("e2e/unused.txt: %v (%d entries)", err, len(listed))
	}
	bad := filepath.Join(t.TempDir(), "unused.txt")
	if err := os.WriteFile(bad, []byte("# comment\n\npublisher dynamodb:ListStreams\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readUnused(bad); err == nil || !strings.Contains(err.Error(), ":3:") {
		t.Fatalf("a line without a reason: %v, want an error naming line 3", err)
	}
}
