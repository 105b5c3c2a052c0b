package wire

import "errors"

// ErrBadResult: a result that does not follow the format, or does not
// fit its request (count, dtype, payload size).
var ErrBadResult = errors.New("wire: malformed lookup result")
