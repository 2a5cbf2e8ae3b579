package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/rxedge/agent/headoffice/console"
)

// ScreenshotsEnv names the directory the browser tests write their
// screenshots to (default: the test's temporary directory).
const ScreenshotsEnv = "RXEDGE_CONSOLE_SCREENSHOTS"

// chromium is Debian's chromium, which .ci/run installs. Without it the
// browser tests skip, except under CI on Linux (.ci/run), where they must
// run.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" && runtime.GOOS == "linux" {
		t.Fatal("chromium is not installed: .ci/run must install it (apt-get install chromium) for the console's browser tests")
	}
	t.Skip("chromium is not installed: the console's browser tests need Debian's chromium (apt-get install chromium)")
	return ""
}

// browser is a headless chromium with its own profile, whose requests
// carry the proxy's header naming user, as the console's reverse proxy
// would set it.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string
}

// newBrowser starts chromium for user; it is closed when the test ends.
func newBrowser(t *testing.T, user string) *browser {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, dir: screenshotDir(t)}
	// The first call starts the browser, and must not have a timeout.
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("browser: start chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{console.DefaultProxyHeader: user}}); err != nil {
		t.Fatalf("browser: set the proxy's header: %v", err)
	}
	return b
}

// screenshotDir is where screenshots go: $RXEDGE_CONSOLE_SCREENSHOTS,
// or the test's temporary directory.
func screenshotDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv(ScreenshotsEnv); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// do runs actions within a minute, failing the test with what.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// get runs one action that returns a value, within a minute.
func get1[T any](b *browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// open navigates to url and waits for selector.
func (b *browser) open(url, selector string) {
	b.t.Helper()
	b.do("open "+url, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS(selector)))
}

// html is the page's whole document.
func (b *browser) html() string {
	b.t.Helper()
	return get1(b, "read the page", chromedp.OuterHTML(chromedp.CSS("html")))
}

// text is the text of the first element matching selector.
func (b *browser) text(selector string) string {
	b.t.Helper()
	return strings.TrimSpace(get1(b, "read "+selector, chromedp.Text(chromedp.CSS(selector))))
}

// screenshot writes the page as name.png.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := get1(b, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// eval evaluates js in the page (as devtools do: the page's
// Content-Security-Policy does not apply), awaiting a promise.
func eval[T any](b *browser, what, js string) T {
	b.t.Helper()
	return get1(b, what, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// submitJS is a script that builds a form posting fields (and, when
// withToken, the page's CSRF token) to path and submits it, as a crafted
// page would. (A script's fetch is refused by the console's
// Content-Security-Policy, connect-src included.)
func submitJS(path string, fields map[string]string, withToken bool) string {
	var b strings.Builder
	b.WriteString("(() => { const f = document.createElement('form'); f.method = 'post'; f.action = " + strconvQuote(path) + ";")
	add := func(k, v string) {
		b.WriteString(" { const i = document.createElement('input'); i.type = 'hidden'; i.name = " + strconvQuote(k) + "; i.value = " + v + "; f.appendChild(i); }")
	}
	for k, v := range fields {
		add(k, strconvQuote(v))
	}
	if withToken {
		add("csrf", "document.querySelector('input[name=csrf]').value")
	}
	b.WriteString(" document.body.appendChild(f); f.submit(); return true; })()")
	return b.String()
}

func strconvQuote(s string) string { return strconv.Quote(s) }
