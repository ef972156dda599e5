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
	j := judgeUnused(functions, used, map[string]int{"publisher events:PutEvents": 3, "create dynamodb:UpdateItem": 5}, listed)
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

// TestUnusedListWithinUsedStatement: an entry whose actions a template
// grants inside a statement that other calls used (a multi-Region stack's
// publisher has ListStreams in one statement with the stream reads) is not
// stale while no call used those actions; once one is, it is.
func TestUnusedListWithinUsedStatement(t *testing.T) {
	functions := map[string]*template.Function{
		"publisher": {Statements: []template.Statement{{ID: "p0", Doc: map[string]any{"Effect": "Allow",
			"Action": []any{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:ListStreams"}}}}},
	}
	used := map[string]int{"p0": 9}
	listed := map[string]string{"publisher dynamodb:ListStreams": "the event source mapping"}
	j := judgeUnused(functions, used, map[string]int{"publisher dynamodb:GetRecords": 9}, listed)
	if len(j.Stale) != 0 || len(j.Unused) != 0 || j.Listed != 1 {
		t.Errorf("held in a used statement, never called: stale %v unused %v listed %d", j.Stale, j.Unused, j.Listed)
	}
	j = judgeUnused(functions, used, map[string]int{"publisher dynamodb:ListStreams": 1}, listed)
	if !slices.Equal(j.Stale, []string{"publisher dynamodb:ListStreams"}) {
		t.Errorf("called: stale %v", j.Stale)
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
