package embedding

import "errors"

// ErrInvalid: a bad migration request.
var ErrInvalid = errors.New("embedding: invalid request")

// ErrPastEnd: a write at or past a table's end (its size is fixed).
var ErrPastEnd = errors.New("embedding: write past the end of the table (its size is fixed by rows x dim)")

// ErrMoving: another move of the same shard is under way.
var ErrMoving = errors.New("embedding: the shard is being moved")

// ErrNoTier: the mount has no SSD-tier device (mount with --ssd DIR).
var ErrNoTier = errors.New("embedding: no SSD-tier device: mount with --ssd DIR to use embedding tables")

// ErrNoSpace: no device has room for a shard.
var ErrNoSpace = errors.New("embedding: no SSD-tier device has room")
