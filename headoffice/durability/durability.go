// Package durability tells whether central keeps what it acknowledges: that
// every JetStream server fsyncs each write before it answers
// (sync_interval: always) and that, on a cluster, the movement streams and
// the archives have three replicas. It reads what the servers report about
// themselves, over the system account ($SYS.REQ.SERVER.PING.JSZ) or from
// their monitoring endpoints (/varz, /jsz).
//
// Its promise: a report never calls central durable on evidence it did not
// see. Every server that answered is judged; a missing answer, a stream no
// server reported and a single server are said, each finding with a
// one-line fix; and the check changes nothing.
package durability

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/internal/redact"
)

// Severity of a finding.
type Severity string

const (
	OK      Severity = "ok"
	Warning Severity = "warning" // fine for a trial, not for production
	Error   Severity = "error"   // acknowledged movements can be lost
)

// Finding is the verdict on one server or stream.
type Finding struct {
	Severity Severity `json:"severity"`
	Server   string   `json:"server,omitempty"`
	Stream   string   `json:"stream,omitempty"`
	Detail   string   `json:"detail"`
	Fix      string   `json:"fix,omitempty"` // one line, unless OK
}

// Server is what one server reported.
type Server struct {
	Name      string `json:"name"`
	JetStream bool   `json:"jetstream"`
	// SyncAlways: JetStream fsyncs every write before acknowledging it.
	SyncAlways bool `json:"sync_always"`
	// SyncInterval is the background fsync interval otherwise.
	SyncInterval time.Duration `json:"sync_interval"`
	// ClusterSize is the JetStream cluster's size as the server knows it
	// (1 when it is not clustered).
	ClusterSize int `json:"cluster_size"`
}

// Stream is a movement stream or archive as the servers holding it
// reported it.
type Stream struct {
	Account  string   `json:"account"`
	Name     string   `json:"name"`
	Replicas int      `json:"replicas"`
	Servers  []string `json:"servers"` // that reported holding it
}

// Report is the check's result.
type Report struct {
	Source      string    `json:"source"` // "system account" or the monitoring URLs
	ClusterSize int       `json:"cluster_size"`
	Servers     []Server  `json:"servers"`
	Streams     []Stream  `json:"streams"`
	Findings    []Finding `json:"findings"`
}

// Worst is the most severe finding's severity.
func (r Report) Worst() Severity {
	w := OK
	for _, f := range r.Findings {
		if f.Severity == Error {
			return Error
		}
		if f.Severity == Warning {
			w = Warning
		}
	}
	return w
}

// jsz is the part of nats-server's JSInfo (/jsz, PING.JSZ) read here.
type jsz struct {
	ID       string `json:"server_id"`
	Disabled bool   `json:"disabled"`
	Config   struct {
		SyncInterval time.Duration `json:"sync_interval"`
		SyncAlways   bool          `json:"sync_always"`
	} `json:"config"`
	Meta *struct {
		Size int `json:"cluster_size"`
	} `json:"meta_cluster"`
	Accounts []struct {
		Name    string `json:"name"`
		Streams []struct {
			Name   string `json:"name"`
			Config *struct {
				Replicas int `json:"num_replicas"`
			} `json:"config"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

// jszOptions asks for every account's streams with their configuration.
const jszOptions = `{"accounts":true,"streams":true,"config":true}`

// pingJSZ is the system account's request every server answers.
const pingJSZ = "$SYS.REQ.SERVER.PING.JSZ"

// FromSystem asks every server, over nc (a user of the system account),
// and judges their answers. It waits until every server of the JetStream
// cluster answered, or timeout.
func FromSystem(ctx context.Context, nc *nats.Conn, timeout time.Duration) (Report, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return Report{}, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(pingJSZ, inbox, []byte(jszOptions)); err != nil {
		return Report{}, err
	}
	if err := nc.FlushTimeout(timeout); err != nil {
		return Report{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var servers []Server
	var streams []Stream
	want := 1
	for len(servers) < want {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if len(servers) > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				break // some servers did not answer: judged below
			}
			if errors.Is(err, nats.ErrNoResponders) {
				return Report{}, fmt.Errorf("durability: no responders on %s: the user is not in the system account", pingJSZ)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return Report{}, fmt.Errorf("durability: no server answered %s in %s: is this a user of the system account?", pingJSZ, timeout)
			}
			return Report{}, err
		}
		var resp struct {
			Server struct {
				Name string `json:"name"`
			} `json:"server"`
			Data  *jsz `json:"data"`
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return Report{}, fmt.Errorf("durability: answer to %s: %w", pingJSZ, err)
		}
		if resp.Error != nil || resp.Data == nil {
			desc := "no data"
			if resp.Error != nil {
				desc = resp.Error.Description
			}
			return Report{}, fmt.Errorf("durability: server %s answered %s: %s", resp.Server.Name, pingJSZ, desc)
		}
		srv, sts := fromJSZ(resp.Server.Name, resp.Data)
		servers, streams = append(servers, srv), append(streams, sts...)
		want = max(want, srv.ClusterSize)
	}
	return Judge("system account", servers, streams), nil
}

// FromMonitor reads /varz and /jsz of each monitoring URL (one per server,
// e.g. http://central-1:8222) and judges them.
func FromMonitor(ctx context.Context, client *http.Client, urls []string, timeout time.Duration) (Report, error) {
	if client == nil {
		client = http.DefaultClient
	}
	// A comma in a password splits a URL given in a list: errors and the
	// source are scrubbed of what the whole list holds.
	secrets := redact.Secrets(strings.Join(urls, ","))
	var servers []Server
	var streams []Stream
	for _, u := range urls {
		base := strings.TrimRight(u, "/")
		var varz struct {
			Name string `json:"server_name"`
		}
		if err := getJSON(ctx, client, base+"/varz", timeout, &varz); err != nil {
			return Report{}, redact.Error(err, secrets...)
		}
		var j jsz
		if err := getJSON(ctx, client, base+"/jsz?accounts=true&streams=true&config=true", timeout, &j); err != nil {
			return Report{}, redact.Error(err, secrets...)
		}
		srv, sts := fromJSZ(varz.Name, &j)
		servers, streams = append(servers, srv), append(streams, sts...)
	}
	shown := make([]string, len(urls))
	for i, u := range urls {
		shown[i] = redact.URL(u)
	}
	return Judge(redact.Text(strings.Join(shown, ", "), secrets...), servers, streams), nil
}

// getJSON reads u's JSON into v. Its errors show u without credentials:
// net/url's and net/http's errors quote the URL they failed on, so they
// are scrubbed of what u holds.
func getJSON(ctx context.Context, client *http.Client, u string, timeout time.Duration, v any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	shown := redact.URL(u)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("durability: monitoring URL %s is not a URL: %w", shown, redact.ParseError(err, u))
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("durability: %s: %w", shown, redact.Error(errors.Unwrap(err), redact.Secrets(u)...))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("durability: %s: %s", shown, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v); err != nil {
		return fmt.Errorf("durability: %s: %w", shown, err)
	}
	return nil
}

// fromJSZ takes a server's answer apart.
func fromJSZ(name string, j *jsz) (Server, []Stream) {
	if name == "" {
		name = j.ID
	}
	srv := Server{Name: name, JetStream: !j.Disabled, SyncAlways: j.Config.SyncAlways, SyncInterval: j.Config.SyncInterval, ClusterSize: 1}
	if j.Meta != nil && j.Meta.Size > 0 {
		srv.ClusterSize = j.Meta.Size
	}
	var out []Stream
	for _, a := range j.Accounts {
		for _, s := range a.Streams {
			if !Watched(s.Name) {
				continue
			}
			r := 1
			if s.Config != nil && s.Config.Replicas > 0 {
				r = s.Config.Replicas
			}
			out = append(out, Stream{Account: a.Name, Name: s.Name, Replicas: r, Servers: []string{name}})
		}
	}
	return srv, out
}

// Watched tells whether a stream holds movements: a movement stream or an
// archive of any layout.
func Watched(name string) bool {
	if name == central.StreamName || central.IsArchiveStream(name) {
		return true
	}
	rest, ok := strings.CutPrefix(name, central.StreamName+"_")
	if !ok {
		return false
	}
	p, err := strconv.Atoi(rest)
	return err == nil && p >= 0 && p < central.MaxPartitions && strconv.Itoa(p) == rest
}

// Judge turns what the servers reported into findings.
func Judge(source string, servers []Server, streams []Stream) Report {
	r := Report{Source: source, ClusterSize: 1}
	slices.SortFunc(servers, func(a, b Server) int { return cmp.Compare(a.Name, b.Name) })
	r.Servers = servers
	for _, s := range servers {
		r.ClusterSize = max(r.ClusterSize, s.ClusterSize)
	}
	for _, s := range servers {
		switch {
		case !s.JetStream:
			r.Findings = append(r.Findings, Finding{Severity: OK, Server: s.Name, Detail: "JetStream off: holds no streams"})
		case s.SyncAlways:
			r.Findings = append(r.Findings, Finding{Severity: OK, Server: s.Name, Detail: "sync_interval: always (every write fsynced before it is acknowledged)"})
		default:
			r.Findings = append(r.Findings, Finding{Severity: Error, Server: s.Name,
				Detail: fmt.Sprintf("JetStream fsyncs only every %s: a movement acknowledged before a power loss can be lost", s.SyncInterval),
				Fix:    "set `sync_interval: always` in the server's jetstream block (the generated configuration has it) and restart the server"})
		}
	}
	if n := len(servers); r.ClusterSize > n {
		r.Findings = append(r.Findings, Finding{Severity: Error,
			Detail: fmt.Sprintf("only %d of the cluster's %d JetStream servers answered: the others were not checked", n, r.ClusterSize),
			Fix:    "bring the missing servers back (or name every server's monitoring URL) and check again"})
	}

	// One entry per stream, the servers holding it merged.
	byName := map[string]*Stream{}
	for _, s := range streams {
		k := s.Account + "\x00" + s.Name
		if e := byName[k]; e != nil {
			e.Servers = append(e.Servers, s.Servers...)
			e.Replicas = max(e.Replicas, s.Replicas)
			continue
		}
		c := s
		byName[k] = &c
	}
	for _, s := range byName {
		slices.Sort(s.Servers)
		r.Streams = append(r.Streams, *s)
	}
	slices.SortFunc(r.Streams, func(a, b Stream) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Account, b.Account)) })
	if len(r.Streams) == 0 {
		r.Findings = append(r.Findings, Finding{Severity: Warning, Detail: "no server reported a movement stream or archive",
			Fix: "create them with `hq provision` (and check that the system account sees the account holding them)"})
	}
	for _, s := range r.Streams {
		f := Finding{Severity: OK, Stream: s.Name, Detail: fmt.Sprintf("R%d on a cluster of %d", s.Replicas, r.ClusterSize)}
		switch {
		case r.ClusterSize >= 3 && s.Replicas < 3:
			f.Severity = Error
			f.Detail = fmt.Sprintf("R%d on a cluster of %d: losing the server (or disk) that holds it loses acknowledged movements", s.Replicas, r.ClusterSize)
			f.Fix = fmt.Sprintf("give it three replicas: `hq provision --replicas 3` (or `nats stream edit %s --replicas 3`)", s.Name)
		case r.ClusterSize < 3 && s.Replicas < 3:
			f.Severity = Warning
			f.Detail = fmt.Sprintf("R%d on %s: one lost disk loses it; fine for a trial, not for production", s.Replicas, servers1(r.ClusterSize))
			f.Fix = "run central as a three-node cluster and give the streams three replicas (`hq provision --replicas 3`)"
		}
		r.Findings = append(r.Findings, f)
	}
	return r
}

func servers1(n int) string {
	if n <= 1 {
		return "a single server"
	}
	return fmt.Sprintf("a cluster of %d", n)
}
