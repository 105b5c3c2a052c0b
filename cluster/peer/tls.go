package peer

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

// ServerTLS is the chunk server's TLS from files, as etcd's --cert, --key
// and --cacert: this node's certificate and key, and with caFile, mutual
// TLS (a peer must present a certificate that CA signed, as etcd's
// --client-cert-auth), on top of the token.
func ServerTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("peer certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadCA(caFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLS is the fetcher's TLS: peers are verified against caFile (the
// system's roots when ""), and this node presents its certificate and key
// when given, for servers that require one.
func ClientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadCA(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("peer certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func loadCA(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("peer CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("peer CA %s: no PEM certificate in it", caFile)
	}
	return pool, nil
}

// NewClient is an HTTP client for peers: TLS with tlsCfg, plain HTTP when
// nil. Connections are kept and reused between chunks.
func NewClient(tlsCfg *tls.Config) *http.Client {
	tr := &http.Transport{
		Proxy:               nil, // peers are reached directly, whatever $HTTP_PROXY says
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: tr}
}

// Server is a chunk server listening on an address.
type Server struct {
	URL string // its base URL, as the membership record names it
	srv *http.Server
}

// Listen serves h on addr ("127.0.0.2:7600"; port 0 picks a free one),
// over TLS when tlsCfg is given, plain HTTP otherwise (--peer-insecure).
// errLog gets the server's own errors (failed handshakes: a peer with the
// wrong CA); nil means the log package's standard logger.
func Listen(addr string, h http.Handler, tlsCfg *tls.Config, errLog *log.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("peer listen: %w", err)
	}
	scheme := "http"
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
		scheme = "https"
	}
	s := &Server{
		URL: scheme + "://" + ln.Addr().String(),
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: errLog},
	}
	// Serve returns http.ErrServerClosed at Close, or the listener's error
	// when it fails under the server: then peers find the node gone and
	// fetch elsewhere, as from a dead node.
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops listening and cuts every connection at once, as a node that
// dies would (peers reading from it fall back to their next source).
func (s *Server) Close() error { return s.srv.Close() }
