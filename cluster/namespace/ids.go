package namespace

import (
	"fmt"
	"strings"

	"github.com/dnnfs/dnnfs/cluster/ids"
)

// The cluster's identities are cluster/ids'; these names keep this
// package's API whole.
type (
	NodeID      = ids.NodeID
	FileID      = ids.FileID
	FSID        = ids.FSID
	Version     = ids.Version
	ChunkIdx    = ids.ChunkIdx
	ChunkRef    = ids.ChunkRef
	FileVersion = ids.FileVersion
)

// NewFileID returns a fresh random file id (ids.NewFileID).
func NewFileID() FileID { return ids.NewFileID() }

// NewFSID returns a fresh random cluster id (ids.NewFSID).
func NewFSID() FSID { return ids.NewFSID() }

// CleanPath checks a namespace path: relative to the mount root,
// '/'-separated, no leading or trailing '/', no empty, "." or ".."
// component, no NUL. The root itself is "" and names no file.
func CleanPath(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty path", ErrInvalid)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%w: path %q has a NUL", ErrInvalid, p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("%w: path %q: components must be non-empty and not . or ..", ErrInvalid, p)
		}
	}
	return nil
}
