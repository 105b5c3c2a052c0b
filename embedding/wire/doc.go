// Package wire is the lookup protocol of an embedding table's request
// file: the request and result messages, the lookup modes and the element
// types with their names. The daemon (packages embedding and fs) decodes
// requests and encodes results with it; the Go client (package client)
// encodes requests and decodes results with it. It depends on the
// standard library only, so the client stays light. python/dnnfs/
// speaks the same bytes (python/test_dnnfs_wire.py and the client's
// golden tests pin them).
//
// # The request file
//
// Each table T has a request file T.lookup in the same directory (not
// listed by readdir; the name is reserved while T is a table). A process
// opens it read-write, write()s a whole request in one write call, and
// read()s results from the same handle. The handle is a stream (no
// seeking): every read() returns the next completed result, whole, in
// completion order (so not necessarily request order; match by tag). A
// write never waits for I/O; a read waits for the next completion like a
// pipe (EAGAIN with O_NONBLOCK instead), and returns 0 bytes (EOF) if a
// close() of any descriptor of the handle happens while it waits — the
// way to stop reader threads (in Go, close a unix.Dup of f.Fd(): os.File
// defers close(2) until a pending Read returns). Results larger than the
// reader's buffer continue on the next read() by the same thread. Several
// threads may share a handle; a handle may have up to 4096 requests in
// flight (EAGAIN beyond).
//
// # Request
//
// Little-endian, RequestHeaderSize bytes of header, then the arrays:
//
//	offset  size  field
//	0       4     magic 0x514C4E44 ("DNLQ")
//	4       2     version, 1
//	6       1     mode: 0 gather, 1 sum, 2 mean
//	7       1     dtype the caller expects the table to have: 1 f32, 2 f16, 3 bf16
//	8       8     tag, echoed in the result
//	16      4     flags: bit 0 = per-sample weights follow (mode sum only)
//	20      4     reserved, zero
//	24      8     n: number of indices (at most MaxIndices)
//	32      8     b: number of offsets (bags; at most MaxIndices); 0 for gather
//	40      8     total request bytes: 48 + 8n + 8b (+ 4n with weights)
//	48      8n    indices, int64, each in [0, rows)
//	48+8n   8b    offsets, int64, like torch.nn.EmbeddingBag: bag j is
//	              indices[offsets[j] : offsets[j+1]] (the last bag runs to
//	              n); offsets[0] = 0, non-decreasing, <= n
//	...     4n    per-sample weights, float32 (flag bit 0)
//
// Sum and mean with indices need at least one offset (one bag: offsets
// [0]).
//
// # Result
//
//	offset  size  field
//	0       4     magic 0x524C4E44 ("DNLR")
//	4       4     status: 0, or an errno (5 EIO: a device failed; the
//	              payload is empty)
//	8       8     tag
//	16      8     payload bytes
//	24      4     count: rows (gather) or bags (sum, mean)
//	28      1     payload dtype: gather = the table's, sum/mean = 1 (f32)
//	29      3     reserved
//	32      ...   payload: count rows of dim values; an empty bag pools to
//	              zeros
//
// # Errors
//
// A malformed request (bad magic, version, mode, dtype mismatch, an index
// out of range, offsets not starting at 0 or decreasing, a length that
// disagrees with n and b, a write shorter than its header says) fails its
// write with EINVAL and a log line naming the field (a *FieldError); it
// never reaches the scheduler and other requests on the handle are
// unaffected. Statuses and FieldError's EINVAL are errno values because
// that is what the request file answers with, on the wire and in write().
package wire
