// Package wire is the codec of the native path's control channel: the
// frames a client and the daemon exchange over a mount's unix socket to
// get leases on ranges of a file (their extents in the pool), commit what
// was stored through them and release them. The daemon's server and the
// Go client build on it, and a Python client can speak the same bytes
// with struct and socket.send_fds alone: wire_test.go's golden frames are
// the bytes to check it against (python/dnnfs/_wire.py is that codec;
// tests/python checks it against this package's frames and refusals).
//
// It owns the byte layout, the type codes and flag bits, and the rules a
// well-formed message follows. It does no I/O (the transport reads and
// writes frames and attaches descriptors), and knows nothing of pools,
// files or locks: whether a lease may be granted, and what a commit does,
// belong to the daemon. It imports only the standard library, so a
// client stays light.
//
// # Framing
//
// Every message is a frame: a HeaderSize-byte header, then a body of the
// header's body length. All integers are little-endian and unsigned. A
// reader reads the header, checks it with DecodeHeader (which refuses a
// body over MaxBody, or one whose length does not fit its type, before a
// byte of it is read), then reads the body and decodes it with
// DecodeBody. Decode does both for a buffer holding one whole frame.
//
// Requests go client → daemon and carry a request id the client picks;
// the daemon answers each with one reply of the matching type, or an
// error reply, carrying the same id. A reply's type is its request's with
// bit 15 set.
//
// Decoding is strict: a frame that breaks any rule below (a wrong magic,
// version or type, a length that does not fit, an unknown flag bit or
// mode, a non-zero reserved field, an empty or overflowing range, trailing
// bytes) is refused with one of the Err* values of errors.go, and Append
// refuses to encode such a message, so what decodes re-encodes to the
// same bytes. The daemon answers a malformed request with an error reply
// and keeps serving; a frame that breaks the framing itself (magic,
// version, a length) leaves the stream unreadable, and the connection is
// closed.
//
// # Versions
//
// Hello carries the range of versions the client speaks; HelloReply the
// one the daemon chose, which every later frame's header carries. Hello
// and HelloReply keep this layout in every version and their header
// always says HelloVersion (1), so any client can negotiate with any
// daemon. A new version
// may add types, flag bits and fields; it never changes a value below.
// Unknown flag bits are refused rather than ignored because a bit a peer
// does not understand changes what the message means (a lease past EOF, a
// kept size).
//
// # Layout
//
// Fields are ordered largest first, so each lies at a multiple of its
// size from the start of the body (the header is 16 bytes): a C struct or
// a NumPy structured dtype can overlay a body read into aligned memory.
// Extents are padded to 32 bytes for the same reason.
//
// # Descriptors
//
// Two frames carry one file descriptor as SCM_RIGHTS ancillary data (FDs
// says how many): a Lease carries the client's open descriptor of the
// file, opened through the mount (so the kernel checked the permission,
// and the open's flags say read or write); a Grant with GrantPoolFD
// carries the pool's descriptor. The sender passes the descriptor in the
// sendmsg that carries the frame's first byte (in Python,
// socket.send_fds(sock, [frame], [fd])); the receiver reads the header
// with recvmsg and takes it from there (socket.recv_fds(sock, 16, 1)). A
// Lease whose descriptor is missing is the transport's to refuse.
//
// # Header
//
//	offset  size  field      meaning
//	0       4     magic      Magic, 0x574E4E44 ("DNNW")
//	4       2     version    MinVersion..MaxVersion; HelloVersion in a hello
//	6       2     type       a Type code
//	8       4     id         request id, echoed by the reply
//	12      4     length     body bytes, at most MaxBody (65536)
//
// # Hello (type 0x0001)
//
// Client → daemon, the first frame of a connection.
//
//	offset  size  field        meaning
//	0       2     min_version  oldest version the client speaks, > 0
//	2       2     max_version  newest, >= min_version
//
// # HelloReply (type 0x8001)
//
//	offset  size  field        meaning
//	0       8     pool_size    pool bytes
//	8       4     block_size   pool block bytes, a power of two
//	12      4     flags        bit 0 HelloDAX: DAX pool (MAP_SYNC, CLWB);
//	                           bit 1 HelloWrites: write leases allowed
//	16      2     version      version chosen for the connection
//
// # Lease (type 0x0002)
//
// Client → daemon, with the file's descriptor attached.
//
//	offset  size  field   meaning
//	0       8     offset  first byte of the range in the file
//	8       8     length  bytes, > 0; offset+length <= MaxOffset
//	16      4     flags   bit 0 LeaseExtend: may reach past EOF (write only)
//	20      1     mode    1 ModeRead (shared), 2 ModeWrite (exclusive)
//
// # Grant (type 0x8002)
//
// The reply to Lease; count extents follow the fixed part, so the body is
// 24 + 32*count bytes (count <= MaxExtents, 2047).
//
//	offset  size  field    meaning
//	0       8     lease    lease id, never 0
//	8       8     size     file size when granted
//	16      4     flags    bit 0 GrantPoolFD: the pool descriptor is attached
//	20      4     count    number of extents
//
// # Extent
//
// Each of a Grant's extents, at 24 + 32*i, in increasing file order,
// not overlapping in the file.
//
//	offset  size  field     meaning
//	0       8     file_off  offset in the file
//	8       8     pool_off  offset in the pool (and its descriptor)
//	16      8     length    bytes, > 0; each offset+length <= MaxOffset
//	24      4     flags     bit 0 ExtentFresh: newly allocated, not yet in the file
//	28      4     reserved  zero
//
// # Commit (type 0x0003)
//
//	offset  size  field  meaning
//	0       8     lease  a write lease's id
//	8       8     size   the file's new size, <= MaxOffset (0 with CommitKeepSize)
//	16      4     flags  bit 0 CommitKeepSize: leave the size as it is
//
// # CommitReply (type 0x8003)
//
// Sent once the commit is durable.
//
//	offset  size  field  meaning
//	0       8     size   the file's size after the commit
//
// # Release (type 0x0004)
//
//	offset  size  field  meaning
//	0       8     lease  the lease to end
//
// # ReleaseReply (type 0x8004)
//
// An empty body.
//
// # ErrorReply (type 0xFFFF)
//
// The reply to any request that failed.
//
//	offset  size  field     meaning
//	0       4     errno     a Linux errno, > 0
//	4       2     text_len  bytes of text, <= MaxText (1024)
//	6       n     text      UTF-8, for a log line
package wire
