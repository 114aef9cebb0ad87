package pgserver

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestWrongPasswordWithoutSSLModeNamesThePassword: a URL without sslmode means sslmode=prefer, so pgx first
// tries TLS, which a server without ssl refuses, then plain, which fails on the password. The refusal names
// the password, not TLS (which the user never asked for), and never echoes it.
func TestWrongPasswordWithoutSSLModeNamesThePassword(t *testing.T) {
	dir, err := os.MkdirTemp("", "cdc-router-hba-") // not t.TempDir: its parent is closed to the postgres user
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	hba := filepath.Join(dir, "pg_hba.conf")
	lines := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // the cluster runs as postgres, which must read its hba_file
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, f := range []string{dir, hba} {
			if err := os.Chown(f, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	pg, err := testenv.StartPostgres("ssl=off", "password_encryption=scram-sha-256", "hba_file="+hba)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE ROLE pw_router LOGIN REPLICATION PASSWORD 'right-secret'`); err != nil {
		t.Fatal(err)
	}

	wrong := fmt.Sprintf("postgres://pw_router:%s@127.0.0.1:%d/postgres", url.QueryEscape("wrong-secret"), pg.Port)
	for name, connect := range map[string]func() error{
		"sql": func() error {
			c, err := ConnectSQL(ctx, wrong)
			if err == nil {
				c.Close(ctx)
			}
			return err
		},
		"replication": func() error {
			c, err := ConnectReplication(ctx, wrong, 0, nil)
			if err == nil {
				c.Close(ctx)
			}
			return err
		},
	} {
		err := connect()
		if err == nil || !isFatal(err) {
			t.Fatalf("%s: %v; want a refusal", name, err)
		}
		for _, want := range []string{"password", "pw_router", "--pg-url"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", name, err, want)
			}
		}
		for _, not := range []string{"TLS", "ssl = on", "wrong-secret"} {
			if strings.Contains(err.Error(), not) {
				t.Errorf("%s: %q mentions %q", name, err, not)
			}
		}
	}

	// The right password connects: the refusal above was the password's.
	right := fmt.Sprintf("postgres://pw_router:right-secret@127.0.0.1:%d/postgres", pg.Port)
	c, err := ConnectSQL(ctx, right)
	if err != nil {
		t.Fatalf("the right password: %v", err)
	}
	c.Close(ctx)
}
