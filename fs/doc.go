// Package fs is the FUSE face of a dnnfs pool: go-fuse node operations
// translating POSIX requests into core.FS calls. syscall.Errno appears
// only here, at the boundary (errno.go maps pool errors).
//
// What it owns: one node type per file kind (dirNode, fileNode,
// symlinkNode, specialNode, and lookupNode for a table's request file),
// the mapping of core errors to errno, the kernel's references to node IDs
// (kref.go, DESIGN.md §Inode lifetime), the umask and ACL flags of raw
// requests, file handles for open_by_handle_at, and the virtual
// user.dnnfs.* xattrs (status, locks, sessions, tables).
//
// What it must not do: touch the medium, the journal or on-media codecs
// (core and embedding do), keep file-system state of its own beyond
// go-fuse's node tree, or let a syscall.Errno leak into the packages below.
package fs
