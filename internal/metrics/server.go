package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
)

// CheckAddr checks a --metrics-listen address: HOST:PORT with a numeric
// port, and a loopback host (localhost, 127.0.0.0/8, ::1) unless
// allowRemote.
func CheckAddr(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, ErrBadAddr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q: %w", addr, port, ErrBadAddr)
	}
	if allowRemote || host == "localhost" {
		return nil
	}
	if host == "" {
		return fmt.Errorf("%q: no host means every interface: %w", addr, ErrNotLoopback)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q: %w", addr, ErrNotLoopback)
	}
	return nil
}

// Sources are what the metrics read when scraped.
type Sources struct {
	Pool    *core.FS
	Tier    *embedding.Tier // nil without --ssd
	Cluster *cluster.Node   // nil without --etcd
}

// Server is a mount's metrics endpoint. A nil *Server is metrics off:
// every method does nothing (FUSE returns the file system unchanged).
type Server struct {
	ln   net.Listener
	reg  *prometheus.Registry
	fuse *fuseMetrics
	http *http.Server
	log  *zap.Logger

	closeOnce sync.Once
	closeErr  error
}

// Listen binds addr (checked by CheckAddr first) for Serve. A mount binds
// before it mounts, so a port in use fails the mount, not a later scrape.
func Listen(addr string, log *zap.Logger) (*Server, error) {
	if log == nil {
		log = zap.NewNop()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		// "bind: address already in use": the caller names the address.
		if oe, ok := err.(*net.OpError); ok {
			return nil, oe.Err
		}
		return nil, err
	}
	s := &Server{ln: ln, reg: prometheus.NewRegistry(), fuse: newFuseMetrics(), log: log}
	s.reg.MustRegister(s.fuse, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	log.Info("metrics listening", zap.String("url", "http://"+ln.Addr().String()+"/metrics"))
	return s, nil
}

// Addr is the bound address (the port chosen for port 0).
func (s *Server) Addr() string {
	if s == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Serve starts answering /metrics from src, in the background.
func (s *Server) Serve(src Sources) {
	if s == nil {
		return
	}
	if src.Pool != nil {
		s.reg.MustRegister(&poolCollector{p: src.Pool})
	}
	if src.Tier != nil {
		s.reg.MustRegister(&tierCollector{t: src.Tier})
	}
	if src.Cluster != nil {
		s.reg.MustRegister(&clusterCollector{n: src.Cluster})
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorLog: zap.NewStdLog(s.log), ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "dnnfs: Prometheus metrics at /metrics")
	})
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("metrics server stopped", zap.Error(err))
		}
	}()
}

// Close stops the server, waiting (briefly) for scrapes in progress: call
// it before closing the pool the collectors read. Later calls do nothing.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	s.closeOnce.Do(func() {
		if s.http == nil {
			s.closeErr = s.ln.Close()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.http.Shutdown(ctx); err != nil {
			s.closeErr = s.http.Close()
		}
	})
	return s.closeErr
}
