package template

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// basicExecution is the managed policy the CDK gives a custom resource's
// provider: CloudWatch Logs only, which the Lambda service uses and the
// provider's code does not call.
const basicExecution = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"

// CustomResource is one custom resource of the template: the CDK's
// AwsCustomResource (Custom::AWS), one AWS SDK call its provider function
// makes while CloudFormation creates the stack, whose answer the template
// reads with Fn::GetAtt (a replica Region's stack reads its table's stream
// ARN with DescribeTable).
type CustomResource struct {
	LogicalID, Type string
	Provider        string // logical id of its provider function
	Create          SdkCall
}

// SdkCall is an AwsCustomResource's call (its Create property).
type SdkCall struct {
	Service, Action string
	Parameters      map[string]any
	// OutputPaths are the answer's fields (dotted, "Table.LatestStreamArn")
	// the template may read; all of them when empty.
	OutputPaths []string
	// PhysicalResourceID: the answer's field at ResponsePath, or ID.
	ResponsePath, ID string
}

// CustomResources reads the template's custom resources. The local stack
// models the CDK's AwsCustomResource only; any other custom resource, or a
// call setting what it does not model (another Region, an assumed role,
// errors ignored), is an error naming it.
func CustomResources(t *Template, n *Names) ([]CustomResource, error) {
	var out []CustomResource
	for id, r := range t.Resources {
		if r.Type != "AWS::CloudFormation::CustomResource" && !strings.HasPrefix(r.Type, "Custom::") {
			continue
		}
		c := CustomResource{LogicalID: id, Type: r.Type, Provider: refID(r.Properties["ServiceToken"])}
		if p, ok := t.Resources[c.Provider]; !ok || p.Type != "AWS::Lambda::Function" {
			return nil, fmt.Errorf("custom resource %s (%s): its ServiceToken %v is not a function of the template", id, r.Type, r.Properties["ServiceToken"])
		}
		if r.Type != "Custom::AWS" {
			return nil, fmt.Errorf("custom resource %s is %s: the local stack models only the CDK's AwsCustomResource (Custom::AWS)", id, r.Type)
		}
		create, err := n.String(r.Properties["Create"])
		if err != nil {
			return nil, fmt.Errorf("custom resource %s: Create: %w", id, err)
		}
		if c.Create, err = parseSdkCall(create, n.Region()); err != nil {
			return nil, fmt.Errorf("custom resource %s: %w", id, err)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b CustomResource) int { return strings.Compare(a.LogicalID, b.LogicalID) })
	return out, nil
}

func parseSdkCall(s, region string) (SdkCall, error) {
	var in struct {
		Service            string         `json:"service"`
		Action             string         `json:"action"`
		Parameters         map[string]any `json:"parameters"`
		OutputPaths        []string       `json:"outputPaths"`
		OutputPath         string         `json:"outputPath"`
		Region             string         `json:"region"`
		APIVersion         string         `json:"apiVersion"`
		LogAPIResponseData *bool          `json:"logApiResponseData"`
		PhysicalResourceID struct {
			ResponsePath string `json:"responsePath"`
			ID           string `json:"id"`
		} `json:"physicalResourceId"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return SdkCall{}, fmt.Errorf("its call %s is not one the local stack models: %w", s, err)
	}
	if in.Region != "" && in.Region != region {
		return SdkCall{}, fmt.Errorf("its call goes to Region %s; the local stack is %s only", in.Region, region)
	}
	c := SdkCall{Service: in.Service, Action: in.Action, Parameters: in.Parameters, OutputPaths: in.OutputPaths,
		ResponsePath: in.PhysicalResourceID.ResponsePath, ID: in.PhysicalResourceID.ID}
	if in.OutputPath != "" {
		c.OutputPaths = append(c.OutputPaths, in.OutputPath)
	}
	return c, nil
}

func isProvider(crs []CustomResource, id string) bool {
	return slices.ContainsFunc(crs, func(c CustomResource) bool { return c.Provider == id })
}

// Replicated is what the stacks t depends on create in t's Region for it:
// a global table's replica there (AWS::DynamoDB::GlobalTable Replicas) and
// a secret's replica there (ReplicaRegions), which t's stack names rather
// than references. Secrets are by ARN (their name in that Region).
func Replicated(t *Template) (tables []Table, secrets []string, err error) {
	for _, d := range t.Dependencies {
		n := LocalNames(d)
		for _, id := range d.OfType("AWS::DynamoDB::GlobalTable") {
			props, err := resolved(n, d.Resources[id])
			if err != nil {
				return nil, nil, fmt.Errorf("%s %s: %w", d.Stack, id, err)
			}
			if inRegions(props["Replicas"], t.Region) {
				tables = append(tables, Table{LogicalID: d.Stack + "/" + id, Name: n.Refs[id], Properties: props})
			}
		}
		for _, id := range d.OfType("AWS::SecretsManager::Secret") {
			props, err := resolved(n, d.Resources[id])
			if err != nil {
				return nil, nil, fmt.Errorf("%s %s: %w", d.Stack, id, err)
			}
			if inRegions(props["ReplicaRegions"], t.Region) {
				name := str(props["Name"])
				if name == "" {
					return nil, nil, fmt.Errorf("%s %s: a secret replicated to %s without a Name: no stack there can name it", d.Stack, id, t.Region)
				}
				secrets = append(secrets, SecretARN(t.Region, name))
			}
		}
	}
	return tables, secrets, nil
}

func inRegions(list any, region string) bool {
	for _, r := range asList(list) {
		if m, _ := r.(map[string]any); m["Region"] == region {
			return true
		}
	}
	return false
}
