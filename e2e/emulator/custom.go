package emulator

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/exactonce/exactonce/e2e/iam"
	"github.com/exactonce/exactonce/e2e/template"
	"github.com/exactonce/exactonce/shared/awsconfig"
)

// createCustomResource makes a custom resource's call as its provider
// makes it when CloudFormation creates the stack: as the provider's role,
// authorized by the proxy, against the local services. The answer's fields
// become the resource's attributes (Fn::GetAtt) and its physical id (Ref);
// a call that fails fails the start, as it fails the deploy. The local
// stack models DynamoDB DescribeTable only (how a replica Region's stack
// finds its replica's stream); another call fails naming it.
func (d *Deployment) createCustomResource(ctx context.Context, c template.CustomResource, provider *template.Function, proxyURL string) error {
	call := c.Create
	who := fmt.Sprintf("custom resource %s (%s, provider %s)", c.LogicalID, c.Type, c.Provider)
	if !strings.EqualFold(call.Service, "DynamoDB") || !strings.EqualFold(call.Action, "describeTable") {
		return fmt.Errorf("%s calls %s.%s: the local stack models only DynamoDB.describeTable", who, call.Service, call.Action)
	}
	b, _ := json.Marshal(call.Parameters)
	var in dynamodb.DescribeTableInput
	if err := json.Unmarshal(b, &in); err != nil || aws.ToString(in.TableName) == "" {
		return fmt.Errorf("%s: parameters %s are not a DescribeTable request", who, b)
	}
	key := "AKIAE2ECR" + strings.ToUpper(c.LogicalID)
	secret := randomText(40)
	d.Proxy.Keys[key] = &iam.Principal{Function: c.LogicalID, RoleArn: provider.RoleArn, Statements: statements(provider.Statements)}
	cfg := awsconfig.Local(proxyURL)
	cfg.Region = d.Region
	cfg.Credentials = credentials.NewStaticCredentialsProvider(key, secret, "e2e-"+c.LogicalID)
	out, err := dynamodb.NewFromConfig(cfg).DescribeTable(ctx, &in)
	if err != nil {
		return fmt.Errorf("%s: DynamoDB.describeTable %s failed, so CloudFormation could not create it: %w", who, b, err)
	}
	b, err = json.Marshal(out)
	if err != nil {
		return err
	}
	var answer any
	if err := json.Unmarshal(b, &answer); err != nil {
		return err
	}
	flat := map[string]string{}
	flatten("", answer, flat)
	paths := call.OutputPaths
	if len(paths) == 0 {
		for k := range flat {
			paths = append(paths, k)
		}
	}
	for _, p := range paths {
		v, ok := flat[p]
		if !ok {
			return fmt.Errorf("%s: the DescribeTable answer has no %s", who, p)
		}
		d.Names.Attrs[c.LogicalID][p] = v
	}
	switch {
	case call.ResponsePath != "":
		id, ok := flat[call.ResponsePath]
		if !ok {
			return fmt.Errorf("%s: its physicalResourceId's responsePath %s is not in the DescribeTable answer", who, call.ResponsePath)
		}
		d.Names.Refs[c.LogicalID] = id
	case call.ID != "":
		d.Names.Refs[c.LogicalID] = call.ID
	}
	return nil
}

// flatten lists an answer's fields by their dotted paths, as the CDK's
// AwsCustomResource provider does ("Table.LatestStreamArn",
// "Table.Replicas.0.RegionName").
func flatten(prefix string, v any, out map[string]string) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			flatten(join(k), e, out)
		}
	case []any:
		for i, e := range x {
			flatten(join(strconv.Itoa(i)), e, out)
		}
	case nil:
	default:
		out[prefix] = fmt.Sprint(x)
	}
}
