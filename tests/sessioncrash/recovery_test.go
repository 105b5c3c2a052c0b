package sessioncrash_test

import (
	"strings"

	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// Package recovery (fsck) checks every crash image (Check replays a
// pending journal transaction in memory) and every resumed and closed
// pool: it checks the inode's session fields and claims an open session's
// F_log and P_log blocks. Orphans are legitimate in a crash image; any
// other problem fails the fence. Delete this file to run without it.
func init() {
	recoveryCheck = func(m pmem.Medium) ([]string, error) {
		r, err := recovery.Check(m)
		if err != nil {
			return nil, err
		}
		var probs []string
		for _, p := range r.Problems {
			if !strings.Contains(p.What, "orphan") {
				probs = append(probs, p.String())
			}
		}
		return probs, nil
	}
}
