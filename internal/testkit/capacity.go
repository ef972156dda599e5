package testkit

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Units is the capacity DynamoDB reported for some requests: on the table
// and on its global secondary indexes (write units for writes, read units
// for reads).
type Units struct {
	Table, Index float64
}

// Capacity asks DynamoDB for the consumed capacity of every request that
// crosses the clients it is attached to, broken down by index
// (ReturnConsumedCapacity=INDEXES; DynamoDB Local 3.x answers it: an update
// that changes an index key reports the index, one that leaves the keys of
// a keys-only index alone reports none), and sums it by operation. Failed
// conditional writes report nothing (real DynamoDB bills them one unit).
type Capacity struct {
	mu  sync.Mutex
	ops map[string]Units
}

// NewCapacity returns an empty meter.
func NewCapacity() *Capacity { return &Capacity{ops: map[string]Units{}} }

// Attach adds the meter to every client made from cfg.
func (c *Capacity) Attach(cfg *aws.Config) {
	cfg.APIOptions = append(cfg.APIOptions, func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("testkitCapacity",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				ask(in.Parameters)
				out, md, err := next.HandleInitialize(ctx, in)
				if err == nil {
					c.record(awsmiddleware.GetOperationName(ctx), out.Result)
				}
				return out, md, err
			}), middleware.Before)
	})
}

// Take returns the units by operation since the last Take and resets them.
func (c *Capacity) Take() map[string]Units {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = map[string]Units{}
	return out
}

func ask(params any) {
	const idx = types.ReturnConsumedCapacityIndexes
	switch p := params.(type) {
	case *dynamodb.UpdateItemInput:
		p.ReturnConsumedCapacity = idx
	case *dynamodb.PutItemInput:
		p.ReturnConsumedCapacity = idx
	case *dynamodb.DeleteItemInput:
		p.ReturnConsumedCapacity = idx
	case *dynamodb.GetItemInput:
		p.ReturnConsumedCapacity = idx
	case *dynamodb.QueryInput:
		p.ReturnConsumedCapacity = idx
	case *dynamodb.BatchGetItemInput:
		p.ReturnConsumedCapacity = idx
	}
}

func (c *Capacity) record(op string, result any) {
	var used []types.ConsumedCapacity
	switch r := result.(type) {
	case *dynamodb.UpdateItemOutput:
		used = one(r.ConsumedCapacity)
	case *dynamodb.PutItemOutput:
		used = one(r.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		used = one(r.ConsumedCapacity)
	case *dynamodb.GetItemOutput:
		used = one(r.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		used = one(r.ConsumedCapacity)
	case *dynamodb.BatchGetItemOutput:
		used = r.ConsumedCapacity
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.ops[op]
	for _, cc := range used {
		if cc.Table != nil {
			u.Table += aws.ToFloat64(cc.Table.CapacityUnits)
		} else if len(cc.GlobalSecondaryIndexes) == 0 {
			u.Table += aws.ToFloat64(cc.CapacityUnits)
		}
		for _, gsi := range cc.GlobalSecondaryIndexes {
			u.Index += aws.ToFloat64(gsi.CapacityUnits)
		}
	}
	c.ops[op] = u
}

func one(c *types.ConsumedCapacity) []types.ConsumedCapacity {
	if c == nil {
		return nil
	}
	return []types.ConsumedCapacity{*c}
}
