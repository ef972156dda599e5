module github.com/exactonce/exactonce/events

go 1.26.0

require (
	github.com/aws/aws-lambda-go v1.55.1
	github.com/aws/aws-sdk-go-v2 v1.47.7
	github.com/aws/aws-sdk-go-v2/credentials v1.20.15
	github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression v1.10.7
	github.com/aws/aws-sdk-go-v2/service/dynamodb v1.73.1
	github.com/exactonce/exactonce/idempotency v0.1.0
)

require (
	github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue v1.21.19 // indirect
	github.com/aws/aws-sdk-go-v2/internal/configsources v1.5.10 // indirect
	github.com/aws/aws-sdk-go-v2/internal/endpoints/v2 v2.8.10 // indirect
	github.com/aws/aws-sdk-go-v2/service/dynamodbstreams v1.46.6 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/accept-encoding v1.13.24 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/endpoint-discovery v1.13.10 // indirect
	github.com/aws/smithy-go v1.28.8 // indirect
	github.com/go-json-experiment/json v1.27.2 // indirect
	github.com/jmespath-community/go-jmespath v1.1.1 // indirect
	golang.org/x/exp v0.0.0-20230314191032-db074128a8ec // indirect
)

// The idempotency module as it is in this repository (docs/contributing.md,
// "Modules, versions and tags"); a module that requires this one uses the
// tagged version above.
replace github.com/exactonce/exactonce/idempotency => ../idempotency
