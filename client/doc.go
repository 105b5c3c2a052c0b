// Package client is the job side of dnnfs segmented-I/O sessions
// (DESIGN.md §Two-layer log): it saves a parameter file from N threads, each writing
// its own segment, and loads one back the same way, through the
// user.dnnfs.session virtual xattr of a file on a dnnfs mount.
//
// A Save that is interrupted — the job killed, the daemon killed, the
// machine rebooted — leaves the session open with each segment's persisted
// tail (the data before it is durable). Calling Save again with the same
// size and thread count resumes it: every unfinished segment is written
// from its tail only, and Stats says how much was skipped.
//
//	st, err := client.Save("/mnt/ckpt/w.bin", src, size, 4)
//	st, err = client.Load("/mnt/ckpt/w.bin", dst, 4)
//
// The file system splits the file (4 KiB aligned segments, the last one
// takes the rest) and tracks progress; this package only writes each
// segment in order and reads the session state back.
//
// What it owns: the job side of sessions (splitting work over threads,
// resuming from tails) and the table lookup client (OpenTable, Lookup,
// Submit/Next), speaking the formats of package embedding/wire.
//
// What it must not do: import anything of dnnfs but embedding/wire and
// internal/* (it is linked into training jobs), or reach the pool other than
// through ordinary system calls on a mounted dnnfs.
package client
