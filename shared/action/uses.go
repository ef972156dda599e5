package action

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"time"
)

// Multi-use actions (licence seats, limited coupons, group tickets, a
// flash-sale coupon of a million uses): an action created with maxUses N > 1
// (or releasable) lets N callers, each named by a useId, take one use each.
// A useId holds at most one use at a time; a releasable action's use can be
// given back, and its useId may take a use again later.
//
// Storage (see docs/design.md, "Multi-use actions"): the action's item holds
// only what its create wrote. Its capacity is spread over gates, small items
// of at most GateSeats uses each whose capacities add up to exactly maxUses;
// a useId has a home gate (by a hash of the useId), and a held use is an
// entry of one gate, keyed by the useId's token, so one conditional write on
// one gate takes or releases a use, at any N, and a useId can be held at most
// once. What a take or a release answered is a record of its own (a
// UseRecord), keyed by the call (its Idempotency-Key, or its request id).

// MaxUsesLimit bounds maxUses.
const MaxUsesLimit = 1_000_000

// GateSeats is the most uses one gate holds: a gate item stays under the
// 1 KB that one write unit covers (measured with the longest tenant and
// action ids: see store's gate size test), whatever maxUses is.
const GateSeats = 24

// Outcome codes of multi-use actions.
const (
	CodeNoUsesLeft    Code = "no_uses_left"
	CodeUseNotFound   Code = "use_not_found"
	CodeNotReleasable Code = "not_releasable"
)

// MultiUse reports whether a is a multi-use action (consumes name a useId).
// A single-use action stores none of the multi-use fields.
func (a *Action) MultiUse() bool { return a.MaxUses > 0 }

// Gates is how many gates an action of maxUses uses has.
func Gates(maxUses int) int { return (maxUses + GateSeats - 1) / GateSeats }

// GateCap is the capacity of gate i of an action of maxUses uses: the uses
// are split as evenly as they go, so the capacities add up to maxUses.
func GateCap(maxUses, i int) int {
	g := Gates(maxUses)
	c := maxUses / g
	if i < maxUses%g {
		c++
	}
	return c
}

// UseToken names a useId in a gate: 11 characters (64 bits of SHA-256), the
// same for every take of the useId, so a gate holds a useId at most once.
// It is a hash of an id, not of a secret.
func UseToken(useID string) string {
	sum := sha256.Sum256([]byte("use\x00" + useID))
	return base64.RawURLEncoding.EncodeToString(sum[:8])
}

// HomeGate is the gate a useId's take goes to first.
func HomeGate(token string, gates int) int {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 8 {
		return 0
	}
	return int(binary.BigEndian.Uint64(b) % uint64(gates))
}

// ProbeStep is how far apart the gates a useId tries after its home gate
// are (gate home + k·step for k = 1, 2, …, every gate once): a step of its
// own, from another part of its token, so the takes of a nearly full
// action spread over the gates left instead of crowding the ones just
// after the full ones (as one step for all would).
func ProbeStep(token string, gates int) int {
	if gates < 3 {
		return 1
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 8 {
		return 1
	}
	step := 1 + int(binary.BigEndian.Uint32(b[4:])%uint32(gates-1))
	for gcd(step, gates) != 1 {
		step = step%(gates-1) + 1
	}
	return step
}

// ProbePosition is where gate lies along token's probe sequence: the k
// with gate = home + k·step (mod gates), 0 at the home gate.
func ProbePosition(token string, gates, gate int) int {
	home, step := HomeGate(token, gates), ProbeStep(token, gates)
	// k = (gate − home) · step⁻¹ (mod gates): step is coprime with gates,
	// and the extended Euclidean algorithm gives its inverse.
	inv, next := 1, 0
	for r, rNext := step%gates, gates; rNext != 0; {
		q := r / rNext
		r, rNext = rNext, r-q*rNext
		inv, next = next, inv-q*next
	}
	mod := func(v int) int { return (v%gates + gates) % gates }
	return mod(mod(gate-home) * mod(inv))
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// UseRef names the call that took or released a use: its Idempotency-Key
// when it sent one (the keyed digest), else its request id. A record of the
// call is kept under RefHash(ref).
func UseRef(op string, w Write) string {
	if w.Key != "" {
		return op + "k" + w.Key
	}
	return op + "r" + w.RequestID
}

// RefHash is the 12-character name of a call's record (72 bits of
// SHA-256 of its ref).
func RefHash(ref string) string {
	sum := sha256.Sum256([]byte(ref))
	return base64.RawURLEncoding.EncodeToString(sum[:9])
}

// Op prefixes of UseRef: a key is scoped to one operation.
const (
	OpTake    = "t"
	OpRelease = "x"
)

// Entry is a held use in its gate: the record of the take that holds it,
// and when that take's write committed.
type Entry struct {
	Ref string    // RefHash of the take
	At  time.Time // usedAt: the time the gate write carried
}

// Gate is one gate of a multi-use action as read from the table.
type Gate struct {
	Index     int
	CreatedAt time.Time // the action's createdAt: a gate of an earlier action of the same id is stale
	Cap       int
	Held      int // entries held (Entries may list only some: a read of one useId's entry)
	ActiveAt  time.Time
	ExpiresAt time.Time
	// Entries are the held uses, by UseToken; Forwards name, for a
	// releasable action's useIds homed here, the gate holding their use.
	Entries  map[string]Entry
	Forwards map[string]Forward
	// Closed is set by a cancel (CanceledAt), before the action's own
	// write: a closed gate takes and releases nothing.
	Closed bool
	// Clock is the last time a write to a releasable action's gate carried:
	// every write carries a later one, so takes and releases are stamped in
	// the order they committed.
	Clock time.Time
	TTL   int64 // epoch seconds; a gate past it is gone, whatever the table still shows
	// LastRelease is the token and time of the last use this gate freed
	// (the stream record of that write carries it to its event).
	LastRelease     string
	LastReleaseTime time.Time
	// Reach is, for an action that is not releasable, how far along its
	// probe sequence (ProbePosition) the furthest use of a useId homed at
	// this gate lies, as far as the takes recorded it. Once SoldOut is set
	// on gate 0 it is exact: every gate is full, so no use ever moves again.
	Reach   int
	SoldOut bool
}

// Forward says which gate holds a useId's use, since when.
type Forward struct {
	Gate int
	At   time.Time
	Ref  string // the take that wrote it ("" in a forward written before forwards named it)
}

// Full reports whether g holds all the uses it can.
func (g *Gate) Full() bool { return g.Held >= g.Cap }

// Live reports whether g is a gate of the action created at createdAt,
// at instant now.
func (g *Gate) Live(createdAt, now time.Time) bool {
	return g != nil && g.CreatedAt.Equal(createdAt) && g.TTL >= now.Unix()
}

// UseRecord is what one take or release call did, kept under its call's
// RefHash for the action's retention: a re-sent call finds it before it
// writes anything, so the first answer a key got is its answer forever.
type UseRecord struct {
	Ref string // RefHash
	// ActionCreatedAt is its action's createdAt: a record of an earlier
	// action of the same id is stale.
	ActionCreatedAt time.Time
	Op              string // OpTake or OpRelease
	UseID           string
	Write           Write // the call's key digest, fingerprint and request id
	// Reason of a take.
	Reason string
	// RequestedAt is when the call wrote this record, before its gate write.
	RequestedAt time.Time
	// Outcome is "" while the call's gate write may still land (a take is
	// then answered by its gate entry); else the code it was answered with
	// ("ok" for a success found made, e.g. a take answered as the replay of
	// the use its useId held).
	Outcome Code
	// Of names the take a replayed take or a release answered for.
	Of string
	// UsedAt and ReleasedAt are the committed times: a take's is its gate
	// entry's; a release sets both on its take's record and its own.
	UsedAt     time.Time
	ReleasedAt time.Time
	// Release is the write of the release that frees a take's use, and
	// ReleaseRef that call's record name: a release stamps the take's record
	// before its gate write frees the entry.
	Release    Write
	ReleaseRef string
	// Holder is the request id of the attempt of a take in charge of it
	// until HeldUntil (zero once it let go after a failure): a keyed
	// re-send meanwhile, while the take is unresolved, is told to retry
	// later instead of acting beside it.
	Holder    string
	HeldUntil time.Time
}

// OutcomeOK is the Outcome of a call that succeeded.
const OutcomeOK Code = "ok"

// ReleaseRequest is the body of POST /actions/{actionId}/uses/{useId}/release
// (empty, or {}).
type ReleaseRequest struct{}

// validateUses checks maxUses and releasable and sets them on a. A PIN
// guards one use; on a multi-use action it is refused (400), so every PIN
// promise keeps holding for the actions that have one.
func validateUses(r *CreateRequest, a *Action) error {
	n := 1
	if r.MaxUses != nil {
		if n = *r.MaxUses; n < 1 || n > MaxUsesLimit {
			return invalid("maxUses", "must be 1 to %d", MaxUsesLimit)
		}
	}
	if n == 1 && !r.Releasable {
		return nil // single-use: exactly as before
	}
	if r.PIN != "" {
		return invalid("pin", "cannot protect a multi-use action (maxUses > 1 or releasable): a PIN guards one use")
	}
	a.MaxUses, a.Releasable = n, r.Releasable
	return nil
}

// ValidateUseID checks a useId (from a consume body or a path): the
// character rules of ids.
func ValidateUseID(id string) error { return ValidateID("useId", id) }

// validateUseID checks a consume's optional useId.
func validateUseID(id string) error {
	if id == "" {
		return nil
	}
	return ValidateUseID(id)
}

// errUseIDRequired and ErrSingleUse refuse a consume that does not fit the
// action: nothing is written.
var (
	errUseIDRequired = &InvalidError{Field: "useId", Message: "is required: this action allows several uses, each named by its useId"}
	ErrSingleUse     = &InvalidError{Field: "useId", Message: "is only for an action with maxUses > 1 or releasable; this one is single-use"}
)

// Closed is the refusal of a take or release on an action canceled, expired,
// or not active yet at now (in that precedence), or nil.
func Closed(a *Action, now time.Time) error {
	switch {
	case !a.CanceledAt.IsZero():
		return Reject(CodeCanceled, a)
	case !a.ExpiredAt.IsZero() || !now.Before(a.ExpiresAt):
		return Reject(CodeExpired, a)
	case now.Before(a.ActiveAt):
		return Reject(CodeNotActive, a)
	}
	return nil
}

// GateRefusal explains why a take or release's write on gate g failed at
// now, from the gate as the write saw it: canceled, expired, not active (in
// that precedence), or nil when the gate is open (the caller then looks at
// the entries).
func GateRefusal(a *Action, g *Gate, now time.Time) error {
	switch {
	case g.Closed:
		return Reject(CodeCanceled, a)
	case !now.Before(g.ExpiresAt):
		return Reject(CodeExpired, a)
	case now.Before(g.ActiveAt):
		return Reject(CodeNotActive, a)
	}
	return nil
}

// Judge compares a re-sent call with the record its key (or request id)
// left: the same call (same fingerprint) is answered from the record;
// another body with the same key is CodeKeyReused; a record under a key
// set the request cannot fingerprint with is an *UnknownKeyError.
func Judge(r *UseRecord, useID string, at Attempt) (same bool, err error) {
	replay, reused, err := idempotency(r.Write, at)
	switch {
	case err != nil:
		return false, err
	case reused, replay && r.UseID != useID:
		return false, Reject(CodeKeyReused, nil)
	}
	return replay, nil
}

// UsesRemaining is how many more uses a multi-use action can hold now.
func (a *Action) UsesRemaining() int { return max(a.MaxUses-a.UsesHeld, 0) }
