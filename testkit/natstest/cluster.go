package natstest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/hub"
)

// clusterTimeout bounds the waits for a cluster to form, elect leaders and
// catch up. Raft elections take seconds; a healthy cluster on loopback
// needs far less than this.
const clusterTimeout = 30 * time.Second

// Cluster is a JetStream cluster on loopback with central's streams
// replicated on three of its nodes: every partition's movement stream and
// archive, and the fleet view. Its methods are safe for concurrent use,
// except that those taking a testing.TB must be called from the test's
// goroutine.
type Cluster struct {
	mu    sync.Mutex
	nodes []*clusterNode
	// account holds the streams: the server's global account, or
	// provision.CentralAccount when the nodes run a configuration file.
	account string
	// streams are the movement streams, then the archives.
	movements, archives []string
}

type clusterNode struct {
	opts hub.Options
	h    *hub.Hub
}

// StartCluster starts an n-node cluster (n at least 3), each node with its
// own store in a new temporary directory, and provisions central's streams
// (streams.Provision) with three replicas, for as many partitions as the
// stream options (WithStream) give. It returns once every movement stream
// and archive has a leader. Options apply to every node; the streams'
// Replicas is set to 3. With WithConfigFile, such as the generated
// production configuration, the streams are in its account RX and are
// provisioned with the option's credentials. The cluster is stopped when
// the test ends.
func StartCluster(tb testing.TB, n int, opts ...Option) *Cluster {
	tb.Helper()
	if n < 3 {
		tb.Fatalf("natstest: start cluster: %d nodes, need at least 3 for three replicas", n)
	}
	// Client and route ports are all chosen up front, so that no node's
	// listener takes a port meant for another.
	ports, err := freePorts(2 * n)
	if err != nil {
		tb.Fatalf("natstest: start cluster: %v", err)
	}
	clientPorts, routePorts := ports[:n], ports[n:]
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	// The stores' directories first: cleanups run last registered first,
	// and the test's temporary directory, whose removal the first TempDir
	// registers, must outlive the nodes writing into it.
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = tb.TempDir()
	}
	c := &Cluster{account: server.DEFAULT_GLOBAL_ACCOUNT}
	tb.Cleanup(c.stopAll)
	for i := range n {
		o := hub.Options{StoreDir: dirs[i]}
		for _, f := range opts {
			f(&o)
		}
		o.Listen = fmt.Sprintf("127.0.0.1:%d", clientPorts[i])
		o.Provision = nil
		name, port := fmt.Sprintf("n%d", i), routePorts[i]
		o.ServerName = name
		configure := o.Configure // an option's, applied first
		o.Configure = func(so *server.Options) {
			if configure != nil {
				configure(so)
			}
			so.Cluster.Name = "rxedge-test"
			so.Cluster.Host = "127.0.0.1"
			so.Cluster.Port = port
			// Every node lists every node, itself included (the server
			// ignores a route to itself), so any node restarts alone.
			so.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		c.nodes = append(c.nodes, &clusterNode{opts: o})
		c.startNode(tb, i)
	}

	c.provision(tb)
	return c
}

// freePorts finds n distinct free loopback ports. They stay free only until
// someone else takes them; nodes are started right after.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (c *Cluster) startNode(tb testing.TB, i int) {
	tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.h != nil {
		tb.Fatalf("natstest: start node %d: already running", i)
	}
	h, err := startRetrying(n.opts)
	if err != nil {
		tb.Fatalf("natstest: start node %d: %v", i, err)
	}
	n.h = h
}

func (c *Cluster) stopAll() {
	for i := range c.nodes {
		c.StopNode(i)
	}
}

// URLs are the nodes' client URLs, the same across restarts.
func (c *Cluster) URLs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var urls []string
	for _, n := range c.nodes {
		urls = append(urls, "nats://"+n.opts.Listen)
	}
	return urls
}

// Node is node i's hub, nil while it is stopped.
func (c *Cluster) Node(i int) *hub.Hub {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].h
}

// StopNode stops node i at once. Raft leaders on it hand over leadership
// as the server shuts down, as a stopped nats-server process does. It does
// nothing when the node is stopped.
func (c *Cluster) StopNode(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[i]; n.h != nil {
		n.h.Shutdown()
		n.h = nil
	}
}

// RestartNode stops node i and starts it again with its ports and store,
// then waits until its copy of the stream has caught up.
func (c *Cluster) RestartNode(tb testing.TB, i int) {
	tb.Helper()
	c.StopNode(i)
	c.startNode(tb, i)
	c.WaitNodeCurrent(tb, i)
}

// StreamLeader is the index of the node leading the first partition's
// movement stream (RX_MOVEMENTS with one partition), or -1 when no running
// node does.
func (c *Cluster) StreamLeader() int { return c.LeaderOf(c.movements[0]) }

// LeaderOf is the index of the node leading stream, or -1 when no running
// node does.
func (c *Cluster) LeaderOf(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if n.h != nil && n.h.Server().JetStreamIsStreamLeader(c.account, stream) {
			return i
		}
	}
	return -1
}

// WaitStreamLeader waits until a running node leads the first partition's
// movement stream and returns its index.
func (c *Cluster) WaitStreamLeader(tb testing.TB) int {
	tb.Helper()
	return c.WaitLeaderOf(tb, c.movements[0])
}

// WaitLeaderOf waits until a running node leads stream and returns its
// index.
func (c *Cluster) WaitLeaderOf(tb testing.TB, stream string) int {
	tb.Helper()
	var leader int
	waitFor(tb, "a stream leader for "+stream, func() bool {
		leader = c.LeaderOf(stream)
		return leader >= 0
	})
	return leader
}

// WaitNodeCurrent waits until node i is running, knows the cluster's
// current state and holds a current copy of every movement stream and
// archive.
func (c *Cluster) WaitNodeCurrent(tb testing.TB, i int) {
	tb.Helper()
	waitFor(tb, fmt.Sprintf("node %d to be current", i), func() bool {
		h := c.Node(i)
		if h == nil {
			return false
		}
		s := h.Server()
		if !s.JetStreamIsCurrent() {
			return false
		}
		for _, st := range append(slices.Clone(c.movements), c.archives...) {
			if !s.JetStreamIsStreamCurrent(c.account, st) {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond until it holds, failing the test after clusterTimeout.
// Polling is the only way: the server signals none of these states.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("natstest: still waiting for %s after %v", what, clusterTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// provision creates the streams the first node's options name, three
// replicas each, once the nodes have met, and waits for each stream's
// leader.
func (c *Cluster) provision(tb testing.TB) {
	tb.Helper()
	// The first node's options carry the streams' and the credentials.
	first := c.nodes[0].opts
	so := first.Stream
	so.Replicas = 3
	if first.ConfigFile != "" {
		c.account = provision.CentralAccount
	}
	parts := max(so.Partitions, 1)
	for p := range parts {
		c.movements = append(c.movements, central.MovementStream(p, parts))
		c.archives = append(c.archives, central.ArchiveStream(p, parts))
	}
	nc := Connect(tb, strings.Join(c.URLs(), ","), first.ConnectOptions...)
	js := JetStream(tb, nc)
	deadline := time.Now().Add(clusterTimeout)
	for {
		// Fails until the nodes have met and elected a meta leader.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := streams.Provision(ctx, js, so)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("natstest: provision the streams on the cluster: still failing after %v: %v", clusterTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	nc.Close()
	for _, s := range append(slices.Clone(c.movements), c.archives...) {
		c.WaitLeaderOf(tb, s)
	}
}
