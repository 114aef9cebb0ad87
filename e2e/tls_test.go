package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

// ca is a throwaway certificate authority that writes PEM files into dir.
type ca struct {
	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	path string // the CA certificate's PEM file
}

func newCA(t testing.TB, dir, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c := &ca{t: t, dir: dir, key: key}
	if c.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	c.path = c.write(name+".crt", "CERTIFICATE", der)
	return c
}

func (c *ca) write(name, typ string, der []byte) string {
	c.t.Helper()
	path := filepath.Join(c.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return path
}

// issue writes a certificate for commonName (a server's when hosts are given) and its key, and returns the
// paths of both files.
func (c *ca) issue(name, commonName string, hosts ...string) (certFile, keyFile string) {
	c.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		c.t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: commonName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		c.t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.write(name+".crt", "CERTIFICATE", der), c.write(name+".key", "PRIVATE KEY", keyDER)
}

// tlsProxy terminates TLS in front of RabbitMQ's plain AMQP port: it requires a client certificate signed by
// clientCA (RequireAndVerifyClientCert) and relays the AMQP bytes to target. The machine's broker is shared
// by every test, so it is not reconfigured for TLS; the proxy checks the router's amqps client side honestly
// (server verification with cacertfile and server_name_indication, the client certificate from certfile and
// keyfile), while the broker behind it sees a plain connection (so EXTERNAL authentication is not tested).
type tlsProxy struct {
	addr     string
	verified atomic.Int64 // handshakes that presented a verified client certificate
}

func startTLSProxy(t testing.TB, certFile, keyFile string, clientCA *x509.Certificate, target string) *tlsProxy {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(clientCA)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &tlsProxy{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.relay(c.(*tls.Conn), target)
		}
	}()
	return p
}

func (p *tlsProxy) relay(c *tls.Conn, target string) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil || len(c.ConnectionState().VerifiedChains) == 0 {
		return
	}
	c.SetDeadline(time.Time{})
	p.verified.Add(1)
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
	io.Copy(c, up)
}

// sslCluster starts a PostgreSQL cluster with ssl=on whose pg_hba.conf admits the role tls_router only over
// TLS with a client certificate (cert authentication: verified against ssl_ca_file, common name = role);
// the test harness keeps a trusted plain line for postgres.
func sslCluster(t testing.TB, dir string, serverCA, clientCA *ca) *testenv.Postgres {
	t.Helper()
	certFile, keyFile := serverCA.issue("pg-server", "localhost", "localhost", "127.0.0.1")
	hba := filepath.Join(dir, "pg_hba.conf")
	lines := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhostssl all tls_router 127.0.0.1/32 cert\n"
	if err := os.WriteFile(hba, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // the cluster runs as postgres, which must own its key file
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, f := range []string{certFile, keyFile, clientCA.path, hba} {
			if err := os.Chown(f, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := testenv.StartPostgres("ssl=on", "ssl_cert_file="+certFile, "ssl_key_file="+keyFile,
		"ssl_ca_file="+clientCA.path, "hba_file="+hba)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestStreamsOverTLSOnBothConnections streams with sslmode=verify-full and a client certificate on both
// PostgreSQL connections (the ordinary one and the walsender), and amqps with cacertfile, certfile, keyfile
// and server_name_indication through the TLS proxy; then checks that file and certificate problems stop the
// router at once with the parameter (and the file) named, instead of being retried for 30 s.
func TestStreamsOverTLSOnBothConnections(t *testing.T) {
	dir, err := os.MkdirTemp("", "cdc-router-tls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // the cluster's user reads its certificate and key here
	serverCA, clientCA, stranger := newCA(t, dir, "server-ca"), newCA(t, dir, "client-ca"), newCA(t, dir, "stranger-ca")
	cluster := sslCluster(t, dir, serverCA, clientCA)
	ctx := context.Background()

	plain := cluster.NewDatabase(t)
	db, err := pgx.Connect(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if err := migrations.Apply(ctx, db, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tls_router') THEN
		CREATE ROLE tls_router LOGIN SUPERUSER; END IF; END $$`); err != nil {
		t.Fatal(err)
	}
	pgCert, pgKey := clientCA.issue("tls_router", "tls_router")
	u, _ := url.Parse(plain)
	u.User = url.User("tls_router")
	u.Host = "localhost:" + u.Port()
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {serverCA.path}, "sslcert": {pgCert}, "sslkey": {pgKey}}
	u.RawQuery = q.Encode()
	pgURL := u.String()

	amqpPlain := testenv.AMQPURL(t)
	au, _ := url.Parse(amqpPlain)
	proxyCert, proxyKey := serverCA.issue("amqp-server", "localhost", "localhost")
	mqCert, mqKey := clientCA.issue("amqp-client", "cdc-router")
	proxy := startTLSProxy(t, proxyCert, proxyKey, clientCA.cert, au.Host)
	amqpsURL := func(ca, cert, key string) string {
		v := url.Values{"cacertfile": {ca}, "certfile": {cert}, "keyfile": {key}, "server_name_indication": {"localhost"}}
		return fmt.Sprintf("amqps://%s@%s/?%s", au.User.String(), proxy.addr, v.Encode())
	}

	e := &env{t: t, pgURL: plain, amqpURL: amqpPlain, db: db}
	e.slot = strings.TrimPrefix(plain[strings.LastIndex(plain, "/")+1:strings.Index(plain, "?")], "")
	e.exchange, e.queue = "x_"+e.slot, "q_"+e.slot
	t.Cleanup(e.deleteTopology)
	e.declare(true, "#")
	c := e.consume(e.queue)

	proc := exec.Command(binary(t, ""), "run", "--slot", e.slot, "--exchange", e.exchange, "--pg-url", pgURL,
		"--amqp-url", amqpsURL(serverCA.path, mqCert, mqKey))
	r := watchRouter(t, proc)
	r.waitLog("msg=streaming ", 30*time.Second)
	var rows []row
	for i := 0; i < 20; i++ {
		rows = append(rows, row{id: e.insertOne("outbox", fmt.Sprintf("tls-%d", i))})
	}
	c.waitFor(t, rows, 30*time.Second)

	var encrypted int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
		WHERE a.usename = 'tls_router' AND s.ssl AND s.client_dn = '/CN=tls_router'`).Scan(&encrypted); err != nil {
		t.Fatal(err)
	}
	var walsenders int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
		WHERE a.usename = 'tls_router' AND a.backend_type = 'walsender' AND s.ssl`).Scan(&walsenders); err != nil {
		t.Fatal(err)
	}
	if encrypted < 2 || walsenders != 1 {
		t.Errorf("%d TLS connections with the client certificate (%d walsenders), want the ordinary one and the walsender",
			encrypted, walsenders)
	}
	if proxy.verified.Load() == 0 {
		t.Error("no AMQP connection presented a verified client certificate to the TLS proxy")
	}
	proc.Process.Signal(os.Interrupt)
	if code := r.wait(30 * time.Second); code != 0 {
		t.Fatalf("router exited %d after SIGINT", code)
	}

	otherCert, otherKey := stranger.issue("stranger", "tls_router")
	missing := filepath.Join(dir, "missing.crt")
	withParam := func(kv ...string) string { // pgURL with each key set to the value after it
		q := u.Query()
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		w := *u
		w.RawQuery = q.Encode()
		return w.String()
	}
	for _, tc := range []struct {
		name, pgURL, amqpURL string
		want                 []string
	}{
		{"missing sslrootcert", withParam("sslrootcert", missing), "", []string{"sslrootcert file " + missing, "no such file"}},
		{"sslrootcert not PEM", withParam("sslrootcert", pgKey), "", []string{"sslrootcert file " + pgKey, "no PEM certificate"}},
		{"sslkey of another certificate", withParam("sslkey", otherKey), "", []string{"sslcert file " + pgCert, "sslkey file " + otherKey}},
		{"client certificate of an unknown CA", withParam("sslcert", otherCert, "sslkey", otherKey), "", []string{"PostgreSQL refused the client certificate", "sslcert"}},
		{"server certificate of an unknown CA", withParam("sslrootcert", stranger.path), "", []string{"did not pass verification", "sslrootcert"}},
		{"missing cacertfile", pgURL, amqpsURL(missing, mqCert, mqKey), []string{"cacertfile file " + missing}},
		{"keyfile of another certificate", pgURL, amqpsURL(serverCA.path, mqCert, otherKey), []string{"certfile file " + mqCert, "keyfile file " + otherKey}},
		{"AMQP client certificate of an unknown CA", pgURL, amqpsURL(serverCA.path, otherCert, otherKey), []string{"RabbitMQ refused the TLS handshake", "certfile"}},
		{"AMQP server certificate of an unknown CA", pgURL, amqpsURL(stranger.path, mqCert, mqKey), []string{"RabbitMQ's server certificate did not pass verification", "cacertfile"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.amqpURL == "" {
				tc.amqpURL = amqpsURL(serverCA.path, mqCert, mqKey)
			}
			cmd := exec.Command(binary(t, ""), "run", "--slot", e.slot, "--exchange", e.exchange, "--pg-url", tc.pgURL,
				"--amqp-url", tc.amqpURL)
			began := time.Now()
			out, _ := cmd.CombinedOutput()
			took := time.Since(began)
			last := strings.TrimSpace(string(out))
			last = last[strings.LastIndex(last, "\n")+1:]
			if cmd.ProcessState.ExitCode() != 1 || took > 10*time.Second {
				t.Fatalf("exit %d after %v, want 1 at once; output:\n%s", cmd.ProcessState.ExitCode(), took, tail(string(out), 10))
			}
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("last line lacks %q:\n%s", w, last)
				}
			}
			t.Logf("%v: %s", took.Round(time.Millisecond), last)
		})
	}
}
