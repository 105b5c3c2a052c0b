//go:build dnnfs_recovery

package crashimage_test

import (
	"strings"

	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// Built with -tags dnnfs_recovery (TestFencesWithRecoveryCheck does it once
// package recovery compiles): every crash image also goes through the
// independent checker. Orphans (unlinked while open when the machine died)
// are legitimate in a crash image: core.Open frees them.
func init() {
	recoveryCheck = func(m pmem.Medium) ([]string, int, error) {
		rep, err := recovery.Check(m)
		if err != nil {
			return nil, 0, err
		}
		var probs []string
		orphans := 0
		for _, p := range rep.Problems {
			if strings.Contains(strings.ToLower(p.What), "orphan") {
				orphans++
				continue
			}
			probs = append(probs, p.String())
		}
		return probs, orphans, nil
	}
}
