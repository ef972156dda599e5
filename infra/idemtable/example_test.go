package idemtable_test

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"

	"github.com/exactonce/exactonce/infra/idemtable"
)

// The keys table of a Go Lambda in a CDK app: the function may call
// UpdateItem on it (all the library calls) and finds its name in
// IDEMPOTENCY_TABLE.
func ExampleNew() {
	app := awscdk.NewApp(nil)
	stack := awscdk.NewStack(app, jsii.String("Payments"), nil)
	charge := awslambda.NewFunction(stack, jsii.String("Charge"), &awslambda.FunctionProps{
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		// GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc -o dist/charge/bootstrap ./charge
		Code: awslambda.Code_FromAsset(jsii.String("dist/charge"), nil),
	})
	keys := idemtable.New(stack, "IdempotencyKeys", &idemtable.Props{Keep: true})
	idemtable.Grant(keys, charge)
	charge.AddEnvironment(jsii.String("IDEMPOTENCY_TABLE"), keys.TableName(), nil)
	app.Synth(nil)
}
