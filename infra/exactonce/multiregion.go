package exactonce

import (
	"fmt"
	"regexp"
	"slices"
)

// MultiRegion deploys ExactOnce in several Regions on one DynamoDB global
// table with multi-Region strong consistency (MRSC): a conditional write is
// acknowledged only once a quorum of Regions has it and its condition is
// evaluated on the latest version, so an action is consumed once whichever
// Region each caller reaches. Give each Region's stack the same value: the
// first Region's stack creates the table with every replica and the witness
// (deploy it first: the other stacks depend on it); every Region gets its
// own API, functions, publisher (its replica's stream, its own bus),
// sweeper and alarms, its functions pointed at, and allowed only, its
// Region's replica.
//
// MRSC is chosen when the table is created (empty) and cannot be changed:
// a single-Region deployment does not become multi-Region in place.
type MultiRegion struct {
	// Regions are the replica Regions, the stack's own among them: two with
	// WitnessRegion, or three without.
	Regions []string
	// WitnessRegion holds the replicated change data of a two-replica table
	// (no reads or writes, no stack of its own); "" with three Regions.
	WitnessRegion string
	// TableName is the global table's name, the same in every Region (its
	// replicas share it, and the stacks find one another's by it).
	TableName string
}

// mrscRegionSets are the Region sets an MRSC table may span (one set per
// table), as AWS documents them and the pinned CDK checks them.
var mrscRegionSets = [][]string{
	{"us-east-1", "us-east-2", "us-west-2"},
	{"eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1"},
	{"ap-northeast-1", "ap-northeast-2", "ap-northeast-3"},
}

var tableName = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,255}$`)

// Validate reports the first invalid field.
func (m *MultiRegion) Validate() error {
	all := slices.Clone(m.Regions)
	if m.WitnessRegion != "" {
		all = append(all, m.WitnessRegion)
	}
	switch {
	case m.WitnessRegion != "" && len(m.Regions) != 2:
		return fmt.Errorf("exactonce: MultiRegion with a witness needs exactly 2 Regions, not %d", len(m.Regions))
	case m.WitnessRegion == "" && len(m.Regions) != 3:
		return fmt.Errorf("exactonce: MultiRegion needs 3 Regions, or 2 and a WitnessRegion (MRSC spans exactly three), not %d", len(m.Regions))
	case !tableName.MatchString(m.TableName):
		return fmt.Errorf("exactonce: MultiRegion.TableName must be 3-255 of [A-Za-z0-9_.-], not %q", m.TableName)
	}
	for i, r := range all {
		if slices.Index(all, r) != i {
			return fmt.Errorf("exactonce: MultiRegion: Region %s is named twice", r)
		}
	}
	for _, set := range mrscRegionSets {
		if slices.Contains(set, all[0]) {
			for _, r := range all {
				if !slices.Contains(set, r) {
					return fmt.Errorf("exactonce: MultiRegion: %s and %s are not in one MRSC Region set (%v)", all[0], r, set)
				}
			}
			return nil
		}
	}
	return fmt.Errorf("exactonce: MultiRegion: %s is not in an MRSC Region set %v", all[0], mrscRegionSets)
}
