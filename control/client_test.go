package control

import (
	"context"
	"io"
	"net/http"
	"os/user"
	"testing"
	"time"
)

// TestInProcessStreams: the in-process client (the CLI over a stopped
// agent's file) gets the answer while the handler is still writing it, so
// a large export is not held in memory; trailers arrive with the end.
func TestInProcessStreams(t *testing.T) {
	more := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Rx-Error")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "first|")
		<-more // the reader has the first part before the rest is written
		io.WriteString(w, "second")
		w.Header().Set("Rx-Error", "cut short")
	})
	c := InProcess(h)
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := c.raw(context.Background(), http.MethodGet, "/x", nil, "")
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	var resp *http.Response
	select {
	case resp = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the answer waited for the whole body")
	}
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", resp.StatusCode)
	}
	buf := make([]byte, len("first|"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first|" {
		t.Fatalf("first part %q %v", buf, err)
	}
	close(more)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "second" || resp.Trailer.Get("Rx-Error") != "cut short" {
		t.Fatalf("rest %q, trailer %q", rest, resp.Trailer.Get("Rx-Error"))
	}
}

func TestLocalActorNamesThePersonBehindSudo(t *testing.T) {
	root := func() (*user.User, error) { return &user.User{Username: "root"}, nil }
	if got := localActor("alice", root); got != "local:alice (sudo as root)" {
		t.Errorf("under sudo: %q", got)
	}
	if got := localActor("", root); got != "local:root" {
		t.Errorf("as root: %q", got)
	}
	if got := localActor("", func() (*user.User, error) { return nil, io.EOF }); got != "local:unknown" {
		t.Errorf("no user: %q", got)
	}
}
