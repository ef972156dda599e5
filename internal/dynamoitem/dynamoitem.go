// Package dynamoitem is what the action store (shared/store) needs of a
// DynamoDB item: attribute values, a decoder that reports the first
// malformed attribute instead of half-filling a struct, and the one
// conditional UpdateItem whose failed condition returns the old item.
package dynamoitem

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// S, N and B are attribute values.
func S(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func N(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func B(v []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: v} }

// Decoder reads typed attributes of Item. An absent attribute reads as the
// zero value; one of the wrong type or unparsable sets Err (the first one
// only), so a malformed item is an error, never a half-filled value.
type Decoder struct {
	Item map[string]types.AttributeValue
	Err  error
}

// Fail records that attribute name is malformed.
func (d *Decoder) Fail(name string) {
	if d.Err == nil {
		d.Err = fmt.Errorf("malformed attribute %q", name)
	}
}

// Str reads a string attribute.
func (d *Decoder) Str(name string) string {
	switch v := d.Item[name].(type) {
	case nil:
		return ""
	case *types.AttributeValueMemberS:
		return v.Value
	}
	d.Fail(name)
	return ""
}

// Num reads an integer attribute.
func (d *Decoder) Num(name string) int64 {
	switch v := d.Item[name].(type) {
	case nil:
		return 0
	case *types.AttributeValueMemberN:
		i, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			d.Fail(name)
		}
		return i
	}
	d.Fail(name)
	return 0
}

// Bin reads a binary attribute.
func (d *Decoder) Bin(name string) []byte {
	switch v := d.Item[name].(type) {
	case nil:
		return nil
	case *types.AttributeValueMemberB:
		return v.Value
	}
	d.Fail(name)
	return nil
}

// Time reads an RFC 3339 string attribute, in UTC.
func (d *Decoder) Time(name string) time.Time {
	v := d.Str(name)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		d.Fail(name)
	}
	return t.UTC()
}

// Updater is the part of the DynamoDB client Update uses; *dynamodb.Client has it.
type Updater interface {
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// Update runs one conditional UpdateItem (in should ask for
// ReturnValuesOnConditionCheckFailure=ALL_OLD). When the condition fails,
// failed is true and old is the item the write saw (nil if there was none):
// the same request tells why, no read follows. err is the SDK's error.
func Update(ctx context.Context, db Updater, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (written, old map[string]types.AttributeValue, failed bool, err error) {
	out, err := db.UpdateItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	switch {
	case errors.As(err, &ccf):
		return nil, ccf.Item, true, nil
	case err != nil:
		return nil, nil, false, err
	}
	return out.Attributes, nil, false, nil
}

// CreateTable creates the table in, waits until it is active and turns on
// DynamoDB TTL on ttlAttr. It reports exists=true, and does nothing, when
// the table is already there (the caller may then bring it up to date).
func CreateTable(ctx context.Context, db *dynamodb.Client, in *dynamodb.CreateTableInput, ttlAttr string) (exists bool, err error) {
	_, err = db.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	if errors.As(err, &inUse) {
		return true, nil
	}
	name := *in.TableName
	if err != nil {
		return false, fmt.Errorf("create table %s: %w", name, err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &name}, time.Minute); err != nil {
		return false, fmt.Errorf("wait for table %s: %w", name, err)
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &name,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: &ttlAttr, Enabled: &[]bool{true}[0]},
	})
	if err != nil {
		return false, fmt.Errorf("enable ttl on %s: %w", name, err)
	}
	return false, nil
}
