package client

import (
	"errors"

	"github.com/dnnfs/dnnfs/embedding/wire"
)

var (
	// ErrNotDnnfs: the file is not on a dnnfs mount.
	ErrNotDnnfs = errors.New("client: not on a dnnfs mount")
	// ErrSessionConflict: the file has an open session this call cannot
	// resume (another mode, size or thread count).
	ErrSessionConflict = errors.New("client: the file has an open session this call cannot resume")
	// ErrIncomplete: an unfinished write session is open on a file being
	// loaded, so its contents are not all there.
	ErrIncomplete = errors.New("client: the file has an unfinished write session: its contents are incomplete")
)

var (
	// ErrBadResult: a result that does not follow the wire format, or
	// does not fit its request (count, dtype, payload size).
	ErrBadResult = wire.ErrBadResult
	// ErrNothingInFlight: Next was called with no Submit'ed request left
	// to return (the request file's 0-byte read).
	ErrNothingInFlight = errors.New("client: no lookup request in flight")
)
