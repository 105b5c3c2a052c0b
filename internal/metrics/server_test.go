package metrics

import (
	"errors"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		want   error
	}{
		{"127.0.0.1:9464", false, nil},
		{"127.0.0.2:0", false, nil},
		{"[::1]:9464", false, nil},
		{"localhost:9464", false, nil},
		{":9464", false, ErrNotLoopback},
		{"0.0.0.0:9464", false, ErrNotLoopback},
		{"[::]:9464", false, ErrNotLoopback},
		{"10.1.2.3:9464", false, ErrNotLoopback},
		{"metrics.example:9464", false, ErrNotLoopback}, // never resolved: names can change
		{":9464", true, nil},
		{"0.0.0.0:9464", true, nil},
		{"127.0.0.1", false, ErrBadAddr},
		{"127.0.0.1:http", false, ErrBadAddr},
		{"127.0.0.1:70000", true, ErrBadAddr},
	} {
		err := CheckAddr(c.addr, c.remote)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("CheckAddr(%q, allowRemote=%v) = %v, want %v", c.addr, c.remote, err, c.want)
		}
	}
}

// TestNilServer: metrics off is a nil *Server, whose methods do nothing.
func TestNilServer(t *testing.T) {
	var s *Server
	if s.FUSE(nil) != nil {
		t.Error("nil Server's FUSE changed the file system")
	}
	s.Serve(Sources{})
	if err := s.Close(); err != nil || s.Addr() != "" {
		t.Errorf("nil Server: Close = %v, Addr = %q", err, s.Addr())
	}
}
