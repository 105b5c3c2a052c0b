package ids

import "errors"

// ErrInvalid is returned by Valid and the Parse functions for an id that
// is not well formed. cluster/namespace and cluster/peer return it too
// (namespace.ErrInvalid, peer.ErrBadNodeID are this one error).
var ErrInvalid = errors.New("ids: invalid")
