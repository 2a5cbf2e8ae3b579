package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/fleetsim"
)

// Sizes of the console scenario: the issue's, in both modes (the fleet
// is cheap to write; the bulk redrive's stores are in process).
const (
	consoleStores     = 5000
	consoleBulkStores = 500
	consoleRounds     = 15
)

// benchConsole measures the head-office console over a real fleet
// bucket of 5,000 stores: serving the fleet page (its first page, the
// stores sorted problems first, through HTTP on loopback) against one
// read of the bucket (fleet.Read, a direct get of every store's last
// summary: what a page would cost without the index), taking turns; the
// page's time in headless chromium to DOM-ready; and a bulk redrive
// across 500 stores, each the agent's responder over a data file of its
// own (testkit/fleetsim), every store's result read back.
func benchConsole(ctx context.Context, b *bench) error {
	const scn = "10 console"
	dir, err := b.dir("console")
	if err != nil {
		return err
	}
	h, err := startHub(filepath.Join(dir, "hub"), false)
	if err != nil {
		return err
	}
	defer h.Shutdown()
	nc, err := nats.Connect(h.URL(), nats.CustomInboxPrefix("_INBOX_ops"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := writeFleet(ctx, js, consoleStores, b.now); err != nil {
		return err
	}
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	op, err := command.NewSigner(seed)
	if err != nil {
		return err
	}
	c, stop, err := startBenchConsole(ctx, nc, op, filepath.Join(dir, "journal.jsonl"))
	if err != nil {
		return err
	}
	defer stop()
	if err := b.consolePage(ctx, scn, nc, c); err != nil {
		return err
	}
	b.consoleDOMReady(scn, c.url+"/fleet")
	return b.consoleBulk(ctx, scn, filepath.Join(dir, "stores"), h.URL(), op, c)
}

// writeFleet writes n stores' summaries into the fleet view, as their
// agents do: every 50th quarantining, every 20th offline, three versions.
func writeFleet(ctx context.Context, js jetstream.JetStream, n int, now time.Time) error {
	free := uint64(40 << 30)
	for i := range n {
		id := fmt.Sprintf("S%05d", i)
		s := command.Summary{StoreID: id, State: status.Online, Pending: uint64(i % 7), SyncedTotal: uint64(1000 + i), HighestSeq: uint64(1000 + i),
			Version: fmt.Sprintf("1.%d.0", i%3), GeneratedAt: now, FreeDiskBytes: &free, Features: []string{command.FeatureRedriveActor}}
		if i%50 == 0 {
			s.Quarantined = 2
		}
		if i%20 == 0 {
			s.State, s.Reason = status.Offline, "no connection"
		}
		data, _ := json.Marshal(s)
		if _, err := js.PublishAsync(central.FleetSubject(id), data); err != nil {
			return err
		}
		if i%1000 == 999 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Minute):
				return errors.New("console: the fleet view was not written within a minute")
			}
		}
	}
	return nil
}

// benchConsoleServer is a console on loopback and what it stands on.
type benchConsoleServer struct {
	url   string
	index *fleet.Index
}

// startBenchConsole starts an index and a console (the proxy mode,
// trusting loopback) over nc, and waits until the index is ready.
func startBenchConsole(ctx context.Context, nc *nats.Conn, op *command.Signer, journal string) (*benchConsoleServer, func(), error) {
	ix := fleet.NewIndex(fleet.IndexOptions{Limits: fleet.Limits{Stale: 2 * time.Minute, Silent: 15 * time.Minute, MaxAge: time.Hour}})
	j, err := console.OpenFileJournal(journal)
	if err != nil {
		return nil, nil, err
	}
	srv, err := console.New(console.Options{
		Listen: "127.0.0.1:0", Auth: console.AuthProxy, ProxyFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Roles: map[string][]string{"bench": {console.RoleOperator}}, Index: ix, Client: fleet.NewClient(nc, op), Journal: j,
		BulkConcurrency: 16, BulkDeadline: 5 * time.Minute,
	})
	if err != nil {
		j.Close()
		return nil, nil, err
	}
	ln, err := srv.Listen()
	if err != nil {
		j.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	js, _ := jetstream.New(nc)
	idxDone, srvDone := make(chan error, 1), make(chan error, 1)
	go func() { idxDone <- ix.Run(ctx, js) }()
	go func() { srvDone <- srv.Serve(ctx, ln) }()
	stop := func() { cancel(); <-idxDone; <-srvDone; j.Close() }
	select {
	case <-ix.Ready():
		return &benchConsoleServer{url: "http://" + ln.Addr().String(), index: ix}, stop, nil
	case <-time.After(time.Minute):
		stop()
		return nil, nil, errors.New("console: the index was not ready within a minute")
	}
}

// getPage fetches path as the bench's user and returns its body.
func getPage(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(console.DefaultProxyHeader, "bench")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}

// consolePage times the fleet page against one read of the bucket,
// taking turns, and reports the ratio of the medians and the page's
// server time.
func (b *bench) consolePage(ctx context.Context, scn string, nc *nats.Conn, c *benchConsoleServer) error {
	client := &http.Client{Timeout: time.Minute}
	var pages, reads []time.Duration
	var stores int
	for r := range consoleRounds {
		readOnce := func() error {
			t0 := time.Now()
			es, err := fleet.Read(ctx, nc)
			reads, stores = append(reads, time.Since(t0)), len(es)
			return err
		}
		pageOnce := func() error {
			t0 := time.Now()
			body, err := getPage(ctx, client, c.url+"/fleet")
			pages = append(pages, time.Since(t0))
			if err == nil && !strings.Contains(string(body), fmt.Sprintf("of %d matching", consoleStores)) {
				err = errors.New("console: the fleet page does not count every store")
			}
			return err
		}
		steps := []func() error{readOnce, pageOnce}
		if r%2 == 1 {
			slices.Reverse(steps)
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
	}
	if stores != consoleStores {
		return fmt.Errorf("console: the bucket holds %d stores, want %d", stores, consoleStores)
	}
	page, read := quantile(pages, 0.5), quantile(reads, 0.5)
	b.rep.ratio(scn, "console_fleet_page_vs_kv_read", fmt.Sprintf("the fleet page (first 100 of %d stores, problems first), median of %d", consoleStores, consoleRounds),
		float64(page)/float64(read), fmt.Sprintf("one read of the fleet bucket (fleet.Read: every store's last summary, %d stores, in batched direct gets), %.1f ms", consoleStores, ms(read)), atMost(1.0))
	b.rep.value(scn, "console_fleet_page_ms", "the fleet page's time on the server and loopback, median", ms(page), "ms", nil)
	b.logf("console: page %.1f ms, bucket read %.1f ms", ms(page), ms(read))
	return nil
}

// consoleDOMReady loads the fleet page in headless chromium and reports
// the time from navigation to DOMContentLoaded (the median of five
// loads); without chromium the figure is missing.
func (b *bench) consoleDOMReady(scn, url string) {
	const name, what = "console_fleet_page_dom_ready_ms", "the fleet page in headless chromium: navigation start to DOM ready, median of 5"
	path, err := exec.LookPath("chromium")
	if err != nil {
		b.rep.missing(scn, name, what, below(1000), "chromium is not installed")
		return
	}
	dir, _ := os.MkdirTemp(b.root, "chromium-")
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(dir))
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	var times []time.Duration
	err = chromedp.Do(bctx, setProxyUser("bench"))
	for i := 0; i < 5 && err == nil; i++ {
		err = chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("#fleet")))
		var v float64
		if err == nil {
			v, err = chromedp.Run(bctx, chromedp.Evaluate[float64](`performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd`))
		}
		times = append(times, time.Duration(v*float64(time.Millisecond)))
	}
	if err != nil {
		b.rep.missing(scn, name, what, below(1000), "chromium: "+err.Error())
		return
	}
	b.rep.value(scn, name, what, ms(quantile(times, 0.5)), "ms", below(1000))
}

// consoleBulk starts consoleBulkStores stores in process, each with two
// quarantined movements, previews a bulk redrive of them in the console
// and runs it, then checks every store's result on the page and in its
// data file.
func (b *bench) consoleBulk(ctx context.Context, scn, dir, url string, op *command.Signer, c *benchConsoleServer) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	o := fleetsim.Options{URL: url, Dir: dir, OperatorKeys: []string{op.PublicKey()}, Quarantined: 2}
	var stores []*fleetsim.Store
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	for i := range consoleBulkStores {
		s, err := fleetsim.Start(ctx, o, fmt.Sprintf("B%04d", i))
		if err != nil {
			return err
		}
		stores = append(stores, s)
	}
	deadline := time.Now().Add(time.Minute)
	for c.index.Query(fleet.Query{Prefix: "B", State: fleet.CondQuarantining}).Matched < consoleBulkStores {
		if time.Now().After(deadline) {
			return errors.New("console: the index did not see the bulk stores within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t0 := time.Now()
	page, err := runBulk(ctx, c.url, "q=B&state=quarantining")
	took := time.Since(t0)
	if err != nil {
		return err
	}
	done := strings.Count(page, `<span class="done">done</span>`)
	want := fmt.Sprintf("%d of %d store(s) done, %d movement(s) redriven.", consoleBulkStores, consoleBulkStores, 2*consoleBulkStores)
	if done != consoleBulkStores || !strings.Contains(page, want) {
		return fmt.Errorf("console: the bulk redrive reported %d stores done, want %d (%q)", done, consoleBulkStores, want)
	}
	for _, s := range stores {
		if n, err := s.Pending(); err != nil || n != 2 {
			return fmt.Errorf("console: store %s has %d pending after the bulk redrive (%v), want 2", s.ID, n, err)
		}
	}
	b.rep.value(scn, "console_bulk_redrive_500_stores_s", fmt.Sprintf("a filtered bulk redrive across %d stores (agents' responders in process, 16 at a time), every store's result reported", consoleBulkStores), took.Seconds(), "s", nil)
	return nil
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
var storesInput = regexp.MustCompile(`name="stores" value="([^"]*)"`)

// runBulk previews the bulk redrive of the filter and posts it, as a
// browser would: with the session's cookie and CSRF token.
func runBulk(ctx context.Context, base, filter string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Minute}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/bulk?"+filter, nil)
	req.Header.Set(console.DefaultProxyHeader, "bench")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	preview, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf, stores := csrfInput.FindSubmatch(preview), storesInput.FindSubmatch(preview)
	if csrf == nil || stores == nil || len(resp.Cookies()) == 0 {
		return "", fmt.Errorf("console: the bulk preview has no form (%s)", resp.Status)
	}
	form := url.Values{"csrf": {string(csrf[1])}, "stores": {string(stores[1])}, "reason": {"bench: central's limit raised"}}
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, base+"/bulk", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(console.DefaultProxyHeader, "bench")
	req.AddCookie(resp.Cookies()[0])
	resp, err = client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("console: the bulk redrive answered %s", resp.Status)
	}
	return string(page), err
}

// setProxyUser makes the tab's requests carry the proxy's header naming
// user, as the console's reverse proxy sets it.
func setProxyUser(user string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{console.DefaultProxyHeader: user}})
		return err
	})
}
