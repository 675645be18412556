package serve

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
)

const testToken = "s3cret-token-0123456789abcdef"

// tokenFile writes tok (with a trailing newline, as echo writes it) to a
// file and returns its path.
func tokenFile(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// request sends method path with an optional Authorization header and
// returns the status and the response.
func request(t *testing.T, c *http.Client, method, url, auth string, body []byte) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header, b.String()
}

// TestTokenRequired: with a token, /readyz and /v1/step answer 401
// without it, with a wrong one and with one that differs in its last
// byte, and 200 with it; /healthz stays open; the token is in no log line.
func TestTokenRequired(t *testing.T) {
	_, ts, logs := testServer(t, func(c *Config) { c.TokenFile = tokenFile(t, testToken) })
	step, _ := json.Marshal(StepRequest{StateID: state0.StateID, Action: act(env.ListFiles, ".")})
	last := testToken[:len(testToken)-1] + "g"
	for _, path := range []string{"/readyz", "/v1/step"} {
		method, body := http.MethodGet, []byte(nil)
		if path == "/v1/step" {
			method, body = http.MethodPost, step
		}
		for _, c := range []struct{ name, auth string }{
			{"none", ""}, {"wrong", "Bearer nope"}, {"last byte", "Bearer " + last}, {"no scheme", testToken},
			{"basic", "Basic " + testToken}, {"prefix", "Bearer " + testToken[:10]}, {"longer", "Bearer " + testToken + "x"},
		} {
			code, h, resp := request(t, ts.Client(), method, ts.URL+path, c.auth, body)
			if code != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(resp, "token_file") {
				t.Errorf("%s with %s token: got %d %q (WWW-Authenticate %q), want 401 naming token_file", path, c.name, code, resp, h.Get("WWW-Authenticate"))
			}
		}
		if code, _, resp := request(t, ts.Client(), method, ts.URL+path, "Bearer "+testToken, body); code != http.StatusOK {
			t.Errorf("%s with the token: got %d %s, want 200", path, code, resp)
		}
	}
	if code, _, _ := request(t, ts.Client(), http.MethodGet, ts.URL+"/healthz", "", nil); code != http.StatusOK {
		t.Errorf("/healthz without a token: got %d, want 200 (the liveness probe)", code)
	}
	if strings.Contains(logs.String(), testToken) || strings.Contains(logs.String(), testToken[:10]) {
		t.Errorf("the token appears in the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"status":401`) {
		t.Errorf("refusals are not logged:\n%s", logs.String())
	}
}

// TestStartRefusedWithoutToken: beyond loopback without a token, New
// refuses in one line naming token_file; insecure_no_auth allows it; a
// token from the environment counts; an empty token file is refused.
func TestStartRefusedWithoutToken(t *testing.T) {
	t.Setenv(TokenEnv, "")
	fix := fixture(t)
	cases := []struct {
		name    string
		mod     func(*Config)
		env     string
		wantErr string
	}{
		{"every interface", func(c *Config) { c.Addr = "0.0.0.0:0" }, "", "token_file"},
		{"empty host", func(c *Config) { c.Addr = ":8080" }, "", "token_file"},
		{"a LAN address", func(c *Config) { c.Addr = "10.1.2.3:8080" }, "", "insecure_no_auth"},
		{"loopback", func(c *Config) { c.Addr = "127.0.0.1:0" }, "", ""},
		{"localhost", func(c *Config) { c.Addr = "localhost:0" }, "", ""},
		{"ipv6 loopback", func(c *Config) { c.Addr = "[::1]:0" }, "", ""},
		{"insecure on purpose", func(c *Config) { c.Addr, c.InsecureNoAuth = "0.0.0.0:0", true }, "", ""},
		{"token file", func(c *Config) { c.Addr, c.TokenFile = "0.0.0.0:0", tokenFile(t, testToken) }, "", ""},
		{"token from the environment", func(c *Config) { c.Addr = "0.0.0.0:0" }, testToken, ""},
		{"empty token file", func(c *Config) { c.Addr, c.TokenFile = "0.0.0.0:0", tokenFile(t, "  ") }, "", "is empty"},
		{"missing token file", func(c *Config) { c.Addr, c.TokenFile = "0.0.0.0:0", "/nonexistent/token" }, "", "token_file"},
		{"tls cert without key", func(c *Config) { c.TLSCert = "cert.pem" }, "", "tls_key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(TokenEnv, tc.env)
			cfg := DefaultConfig()
			cfg.Data, cfg.Warm = fix, false
			tc.mod(&cfg)
			s, err := New(context.Background(), cfg, slogDiscard())
			if s != nil {
				s.Close()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got %v, want a server", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n")):
				t.Fatalf("got %v, want one line with %q", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), testToken):
				t.Fatalf("the error holds the token: %v", err)
			}
			if tc.wantErr == "token_file" && tc.name != "missing token file" && !errors.Is(err, errNoToken) {
				t.Errorf("got %v, want errNoToken", err)
			}
		})
	}
}

// testCert writes a self-signed certificate for 127.0.0.1 and its key,
// returning their paths and the certificate (PEM) as a CA.
func testCert(t *testing.T) (certFile, keyFile string, ca []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mlerl-env test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, ca
}

// tlsServer serves s over TLS (as Run does) on a loopback port and
// returns its https URL.
func tlsServer(t *testing.T, cfg Config) string {
	t.Helper()
	s, err := New(context.Background(), cfg, slogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tlsConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, tls.NewListener(ln, tc)) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return "https://" + ln.Addr().String()
}

// TestTLSRoundTrip: with tls_cert and tls_key the server answers HTTPS to
// a client that trusts the certificate, with the token; a client that
// does not trust it, or offers only TLS 1.1, is refused.
func TestTLSRoundTrip(t *testing.T) {
	certFile, keyFile, ca := testCert(t)
	cfg := DefaultConfig()
	cfg.Data, cfg.Warm, cfg.TLSCert, cfg.TLSKey, cfg.TokenFile = fixture(t), false, certFile, keyFile, tokenFile(t, testToken)
	url := tlsServer(t, cfg)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, _, body := request(t, client, http.MethodGet, url+"/readyz", "Bearer "+testToken, nil); code != 200 {
		t.Fatalf("https /readyz: got %d %s, want 200", code, body)
	}
	if code, _, _ := request(t, client, http.MethodGet, url+"/readyz", "", nil); code != http.StatusUnauthorized {
		t.Errorf("https /readyz without the token: got %d, want 401", code)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("a client that does not trust the certificate got an answer")
	}
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}}}
	if _, err := old.Get(url + "/healthz"); err == nil {
		t.Error("a TLS 1.1 client got an answer, want TLS 1.2 at least")
	}
	if _, err := tlsConfig(Config{TLSCert: certFile, TLSKey: certFile}); err == nil || !strings.Contains(err.Error(), "tls_key") {
		t.Errorf("a certificate as its own key: got %v, want an error naming tls_key", err)
	}
}

// TestPerClientLimit: a client with per_client requests in flight gets
// 429 with Retry-After; another client is not affected; the slot frees.
func TestPerClientLimit(t *testing.T) {
	s, _, _ := testServer(t, func(c *Config) { c.Concurrency, c.Queue, c.PerClient = 1, 4, 1 })
	leave, ok := s.peers.enter("192.0.2.7:5555") // one request of this client in flight
	if !ok {
		t.Fatal("the first request was not admitted")
	}
	body, _ := json.Marshal(StepRequest{StateID: state0.StateID, Action: act(env.ListFiles, ".")})
	send := func(remote string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/step", bytes.NewReader(body))
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	if rec := send("192.0.2.7:6000"); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "per_client") {
		t.Errorf("second request of the client: got %d %s (Retry-After %q), want 429 naming per_client", rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
	}
	if rec := send("192.0.2.8:6000"); rec.Code != http.StatusOK {
		t.Errorf("another client: got %d %s, want 200", rec.Code, rec.Body.String())
	}
	leave()
	if rec := send("192.0.2.7:6001"); rec.Code != http.StatusOK {
		t.Errorf("after the first request ended: got %d %s, want 200", rec.Code, rec.Body.String())
	}
}

// TestVerlAdapterWithTokenAndTLS: scripts/verl_reward.py against the real
// server over HTTPS with a token: it sends the token from a file and
// verifies the certificate against a CA file; without the token it gets
// 401 and says which variable to set; its readiness probe exits 0.
func TestVerlAdapterWithTokenAndTLS(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	certFile, keyFile, _ := testCert(t)
	tf := tokenFile(t, testToken)
	cfg := DefaultConfig()
	cfg.Data, cfg.Warm, cfg.TLSCert, cfg.TLSKey, cfg.TokenFile = fixture(t), false, certFile, keyFile, tf
	url := tlsServer(t, cfg)
	gt, _ := json.Marshal(map[string]any{"snapshot_ref": state0.SnapshotRef})
	action := act(env.ListFiles, ".")
	out, err := pyScore(t, url, action, string(gt), "", "MLERL_SERVE_TOKEN_FILE="+tf, "MLERL_ENV_CA_FILE="+certFile)
	if err != nil || !strings.HasPrefix(out, "0") && !strings.HasPrefix(out, "-") {
		t.Fatalf("with the token over TLS: got %q (%v), want a reward", out, err)
	}
	out, err = pyScore(t, url, action, string(gt), "", "MLERL_ENV_CA_FILE="+certFile)
	if err == nil || !strings.Contains(out, "HTTP 401") || !strings.Contains(out, "MLERL_SERVE_TOKEN") {
		t.Errorf("without the token: got %q (%v), want EnvServerError HTTP 401 naming MLERL_SERVE_TOKEN", out, err)
	}
	out, err = pyScore(t, url, action, string(gt), "", "MLERL_SERVE_TOKEN="+testToken)
	if err == nil || !strings.Contains(out, "CERTIFICATE_VERIFY_FAILED") && !strings.Contains(out, "certificate") {
		t.Errorf("without the CA file: got %q (%v), want a certificate verification failure", out, err)
	}
	probe := func(extra ...string) error {
		cmd := exec.Command("/usr/bin/python3", filepath.Join(repoRoot(), "scripts", "verl_reward.py"), "ready")
		cmd.Env = append(os.Environ(), append([]string{"MLERL_ENV_URL=" + url, "MLERL_ENV_CA_FILE=" + certFile}, extra...)...)
		return cmd.Run()
	}
	if err := probe("MLERL_SERVE_TOKEN_FILE=" + tf); err != nil {
		t.Errorf("readiness probe with the token: %v, want exit 0", err)
	}
	if err := probe(); err == nil {
		t.Error("readiness probe without the token exited 0, want 1")
	}
}
