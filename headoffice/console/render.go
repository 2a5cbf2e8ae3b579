package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rxedge/agent/status"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

//go:embed static/console.css
var consoleCSS []byte

// pages are the parsed templates, one set per page, each with the
// layout.
type pages map[string]*template.Template

// pageNames are the templates under templates/ besides the layout.
var pageNames = []string{"fleet", "store", "redrive", "bulk", "problems", "findings", "records", "movement", "journal", "message"}

func parsePages() pages {
	p := pages{}
	for _, name := range pageNames {
		p[name] = template.Must(template.New("layout.tmpl").Funcs(funcs).ParseFS(templateFS, "templates/layout.tmpl", "templates/"+name+".tmpl"))
	}
	return p
}

// funcs are the templates' helpers: ages, sizes and times in words.
var funcs = template.FuncMap{
	"ago": func(t, now time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return roundAge(now.Sub(t)) + " ago"
	},
	"agep": func(t *time.Time, now time.Time) string {
		if t == nil || t.IsZero() {
			return "—"
		}
		return roundAge(now.Sub(*t)) + " ago"
	},
	"seconds": func(s *float64) string {
		if s == nil {
			return "—"
		}
		return roundAge(time.Duration(*s * float64(time.Second)))
	},
	"bytes": func(b *uint64) string {
		if b == nil {
			return "—"
		}
		return status.Bytes(*b)
	},
	"utc": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"utcp": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"words": func(s string) string { return strings.ReplaceAll(s, "_", " ") },
	"join":  strings.Join,
	"has":   slices.Contains[[]string],
	"add":   func(a, b int) int { return a + b },
}

// roundAge is a duration to a readable precision.
func roundAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// Frame is what the layout shows around every page.
type Frame struct {
	Title    string
	User     string
	Roles    string
	CSRF     string
	CanAct   bool
	CanAudit bool
	Nav      string
	Now      time.Time
}

// render writes page name with data (which embeds frame through the
// Frame method) with the status code; a template that fails renders
// nothing of itself.
func (s *Server) render(w http.ResponseWriter, r *http.Request, rq *request, code int, name string, data framed) {
	f := data.frame()
	f.Now = s.o.Clock()
	if rq != nil {
		f.User, f.Roles = rq.user.ID, strings.Join(rq.user.Roles, ", ")
		f.CanAct, f.CanAudit = allows(rq.user.Roles, permAct), allows(rq.user.Roles, permAudit)
		if rq.sess != nil {
			f.CSRF = rq.sess.csrf
		}
	}
	var b bytes.Buffer
	if err := s.pages[name].Execute(&b, data); err != nil {
		s.o.Logger.Error("CONSOLE_TEMPLATE_FAILED", "page", name, "error", err.Error())
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// framed is a page's data: it carries the frame.
type framed interface{ frame() *Frame }

func (f *Frame) frame() *Frame { return f }

// messageData is a page with a title and a text.
type messageData struct {
	Frame
	Title string
	Text  string
	Code  int
}

// errorPage renders a refusal or an error with its status code.
func (s *Server) errorPage(w http.ResponseWriter, r *http.Request, rq *request, code int, text string) {
	d := &messageData{Title: http.StatusText(code), Text: text, Code: code}
	d.Frame.Title = d.Title
	s.render(w, r, rq, code, "message", d)
}

func serveCSS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Write(consoleCSS)
}
