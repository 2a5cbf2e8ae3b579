package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/hub"
)

// clusterTimeout bounds the waits for a cluster to form, elect leaders and
// catch up. Raft elections take seconds; a healthy cluster on loopback
// needs far less than this.
const clusterTimeout = 30 * time.Second

// Cluster is a JetStream cluster on loopback with RX_MOVEMENTS replicated
// on three of its nodes. Its methods are safe for concurrent use, except
// that those taking a testing.TB must be called from the test's goroutine.
type Cluster struct {
	mu    sync.Mutex
	nodes []*clusterNode
}

type clusterNode struct {
	opts hub.Options
	h    *hub.Hub
}

// StartCluster starts an n-node cluster (n at least 3), each node with its
// own store in a new temporary directory, and provisions RX_MOVEMENTS with
// three replicas. It returns once the stream has a leader. Options apply to
// every node; the stream's Replicas is set to 3. The cluster is stopped when
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
	c := &Cluster{}
	tb.Cleanup(c.stopAll)
	for i := range n {
		o := hub.Options{StoreDir: tb.TempDir()}
		for _, f := range opts {
			f(&o)
		}
		o.Listen = fmt.Sprintf("127.0.0.1:%d", clientPorts[i])
		o.SkipProvision = true
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

	// The first options of a node carry the stream's.
	so := c.nodes[0].opts.Stream
	so.Replicas = 3
	nc := Connect(tb, strings.Join(c.URLs(), ","))
	js := JetStream(tb, nc)
	deadline := time.Now().Add(clusterTimeout)
	for {
		// Fails until the nodes have met and elected a meta leader.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := hub.Provision(ctx, js, so)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("natstest: provision %s on the cluster: still failing after %v: %v", central.StreamName, clusterTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	nc.Close()
	c.WaitStreamLeader(tb)
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

// StartNode starts the stopped node i again with its ports and store.
func (c *Cluster) StartNode(tb testing.TB, i int) {
	tb.Helper()
	c.startNode(tb, i)
}

// RestartNode stops node i and starts it again with its ports and store,
// then waits until its copy of the stream has caught up.
func (c *Cluster) RestartNode(tb testing.TB, i int) {
	tb.Helper()
	c.StopNode(i)
	c.startNode(tb, i)
	c.WaitNodeCurrent(tb, i)
}

// StreamLeader is the index of the node leading RX_MOVEMENTS, or -1 when
// no running node does.
func (c *Cluster) StreamLeader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, n := range c.nodes {
		if n.h != nil && n.h.Server().JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, central.StreamName) {
			return i
		}
	}
	return -1
}

// WaitStreamLeader waits until a running node leads RX_MOVEMENTS and
// returns its index.
func (c *Cluster) WaitStreamLeader(tb testing.TB) int {
	tb.Helper()
	var leader int
	waitFor(tb, "a stream leader for "+central.StreamName, func() bool {
		leader = c.StreamLeader()
		return leader >= 0
	})
	return leader
}

// WaitNodeCurrent waits until node i is running, knows the cluster's
// current state and holds a current copy of RX_MOVEMENTS.
func (c *Cluster) WaitNodeCurrent(tb testing.TB, i int) {
	tb.Helper()
	waitFor(tb, fmt.Sprintf("node %d to be current", i), func() bool {
		h := c.Node(i)
		if h == nil {
			return false
		}
		s := h.Server()
		return s.JetStreamIsCurrent() && s.JetStreamIsStreamCurrent(server.DEFAULT_GLOBAL_ACCOUNT, central.StreamName)
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
