package cluster

import (
	"context"
	"errors"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/core"
)

// BackgroundStats counts the failures of work the node does in the
// background, which has no caller to return an error to: each is also
// logged (DESIGN §Cluster, "Failures").
type BackgroundStats struct {
	// HolderDrops: holder records of versions this node no longer has
	// that could not be deleted. Peers asking this node for those chunks
	// get a 404 and move on; the record goes with the node's lease.
	HolderDrops int64 `json:"holder_drops_failed"`
	// Rechecks: local copies whose name went elsewhere while they were
	// open, that the last close could not drop; the name watch or the
	// next open does it.
	Rechecks int64 `json:"rechecks_failed"`
	// ReadAheads: chunks read ahead that could not be fetched; the read
	// that needs one fetches it again and returns its error.
	ReadAheads int64 `json:"read_aheads_failed"`
}

type bgCounters struct {
	holderDrops, rechecks, readAheads atomic.Int64
}

func (c *bgCounters) stats() BackgroundStats {
	return BackgroundStats{HolderDrops: c.holderDrops.Load(), Rechecks: c.rechecks.Load(), ReadAheads: c.readAheads.Load()}
}

// dropHolding deletes this node's holder record of (id, ver), whose chunks
// left the pool, without making the caller (a commit, a reset to a newer
// version, an unlink) wait for etcd.
func (n *Node) dropHolding(id namespace.FileID, ver namespace.Version, ino core.Ino) {
	go func() {
		err := n.ns.DropHolding(n.ctx, id, ver)
		if err == nil || errors.Is(n.ctx.Err(), context.Canceled) {
			return // done, or closing: the node's lease takes its records along
		}
		n.bg.holderDrops.Add(1)
		n.log.Warn("dropping a holder record failed; peers asking for its chunks get a 404 until the node lease ends",
			zap.String("id", string(id)), zap.Uint64("version", uint64(ver)), zap.Uint64("ino", uint64(ino)), zap.Error(err))
	}()
}
