package units

import "errors"

// These texts carry no package prefix, unlike the other packages' sentinels:
// they finish an error about a size flag or option that an admin reads
// (`--size 0: must be more than 0`), where a Go package name says nothing.

// ErrZero: a size of 0, where a positive one is needed.
var ErrZero = errors.New("must be more than 0")

// ErrTooLarge: a size that does not fit in an int64 (8 EiB - 1).
var ErrTooLarge = errors.New("too large (the largest size is 8EiB-1)")
