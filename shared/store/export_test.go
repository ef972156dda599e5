package store

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// QueryUserFrom runs a list page's index query from a raw start key, so
// tests can send the start keys DynamoDB refuses.
func (st *Store) QueryUserFrom(ctx context.Context, tenantName, userID string, from map[string]types.AttributeValue) error {
	_, _, err := st.queryUser(ctx, tenantName, userID, from, nil, 1)
	return err
}
