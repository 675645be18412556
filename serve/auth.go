package serve

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
)

// Who may talk to serve-env. /v1/step runs the sender's action in the
// sandbox and answers the state's observation (task data included), so
// every endpoint but /healthz (the liveness probe) needs the bearer token
// when one is set; listening beyond loopback without one is refused
// unless insecure_no_auth says so. TLS is on request (tls_cert,
// tls_key), and a client's share of the queue can be capped (per_client).

// errNoToken is the start refusal on a non-loopback address.
var errNoToken = errors.New("no token to serve beyond loopback with")

// loadToken reads the bearer token: token_file's content (trimmed), else
// MLERL_SERVE_TOKEN; nil when neither is set. An empty token is an error.
// Errors never contain the token.
func loadToken(c Config) ([]byte, error) {
	var tok string
	switch {
	case c.TokenFile != "":
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("serve-env: token_file: %w", err)
		}
		tok = strings.TrimSpace(string(b))
		if tok == "" {
			return nil, fmt.Errorf("serve-env: token_file %s is empty: write a random secret into it (e.g. `openssl rand -hex 32 > %s`)", c.TokenFile, c.TokenFile)
		}
	case os.Getenv(TokenEnv) != "":
		tok = strings.TrimSpace(os.Getenv(TokenEnv))
		if tok == "" {
			return nil, fmt.Errorf("serve-env: %s holds only whitespace: set it to a random secret", TokenEnv)
		}
	default:
		return nil, nil
	}
	if strings.ContainsAny(tok, "\r\n") {
		return nil, fmt.Errorf("serve-env: the token holds a line break: it must be one line (an HTTP header value)")
	}
	return []byte(tok), nil
}

// checkExposure refuses a non-loopback listen address without a token,
// unless insecure_no_auth allows it: one line that says how to set one.
func checkExposure(c Config, token []byte) error {
	if token != nil || c.InsecureNoAuth || loopback(c.Addr) {
		return nil
	}
	return fmt.Errorf("serve-env: addr %s: %w: set --token_file FILE (or %s) and send Authorization: Bearer <token>, or --insecure_no_auth to serve anyone who reaches the port", c.Addr, errNoToken, TokenEnv)
}

// loopback reports whether addr's host is a loopback name or address
// (":8080" and "0.0.0.0:8080" listen on every interface: not loopback).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authorized compares the request's bearer token with the server's in
// constant time (over SHA-256 digests, so that not even the length
// leaks).
func authorized(r *http.Request, token []byte) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256(token)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// tlsConfig loads tls_cert and tls_key (nil, nil when TLS is off).
func tlsConfig(c Config) (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("serve-env: tls_cert %s / tls_key %s: %w", c.TLSCert, c.TLSKey, err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// clients counts each client's requests in flight (running or waiting).
type clients struct {
	limit int
	mu    sync.Mutex
	n     map[string]int
}

// enter admits one more request of the client at remote (host:port)
// unless it already has limit in flight; done must be called once when
// it ends. A limit of 0 admits everything.
func (c *clients) enter(remote string) (done func(), ok bool) {
	if c.limit == 0 {
		return func() {}, true
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[host] >= c.limit {
		return nil, false
	}
	c.n[host]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n[host]--; c.n[host] == 0 {
			delete(c.n, host)
		}
	}, true
}
