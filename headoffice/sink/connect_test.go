package sink

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rxedge/agent/testkit/pgtest"
)

// TestConnectNamesTheServersAnswer: with the default sslmode (prefer),
// pgx tries TLS, which a server without it refuses, then plaintext,
// which the server refuses for the password. The error says the second
// (the server's answer), not the first, and keeps both for errors.As.
func TestConnectNamesTheServersAnswer(t *testing.T) {
	pg := pgtest.Start(t)
	url := strings.Replace(pg.URL("postgres", "Wrong-Hunter2", "postgres"), "sslmode=disable", "sslmode=prefer", 1)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Connect(context.Background(), cfg)
	if err == nil {
		t.Fatal("connected with a wrong password")
	}
	msg := err.Error()
	if strings.Contains(msg, "tls error") || !strings.Contains(msg, "password authentication failed") || !strings.Contains(msg, "28P01") {
		t.Errorf("got %q, want the server's refusal of the password (28P01) and no TLS error", msg)
	}
	if strings.Contains(msg, "Hunter2") {
		t.Errorf("the error holds the password: %q", msg)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28P01" {
		t.Errorf("errors.As finds %v, want the server's 28P01", pe)
	}
	if Retryable(err) {
		t.Error("a wrong password is retried")
	}
}
