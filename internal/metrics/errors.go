package metrics

import "errors"

// These texts carry no package prefix, unlike the other packages' sentinels:
// they finish an error about the --metrics-addr flag that an admin reads
// (`--size 0: must be more than 0`), where a Go package name says nothing.

// ErrNotLoopback: a metrics address whose host is empty (every interface)
// or not a loopback address, without the flag that allows it. The metrics
// name files' activity and the pool's layout, so they stay on the host
// unless the administrator says otherwise.
var ErrNotLoopback = errors.New("not a loopback address, so other hosts could read the metrics (add --metrics-allow-remote to allow it)")

// ErrBadAddr: a metrics address that is not HOST:PORT.
var ErrBadAddr = errors.New("want HOST:PORT, e.g. 127.0.0.1:9464")
