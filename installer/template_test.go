package installer

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestTemplate(t *testing.T) {
	type edit func(*Template) error
	set := func(path, v string) edit { return func(t *Template) error { return t.Set(path, v) } }
	first := func(key, v string) edit { return func(t *Template) error { return t.SetFirst(key, v) } }
	list := func(path string, v ...string) edit { return func(t *Template) error { return t.SetList(path, v) } }
	cases := []struct {
		name, in string
		edits    []edit
		want     string // "" with wantErr
		wantErr  string
	}{
		{"replaces a top-level key, keeps the rest",
			"# store_id: a comment\nstore_id: S1 # old\n\nlog: info\n", []edit{set("store_id", "S2")},
			"# store_id: a comment\nstore_id: 'S2'\n\nlog: info\n", ""},
		{"adds a missing top-level key at the end",
			"log: info\n", []edit{set("data_dir", "/d")},
			"log: info\ndata_dir: '/d'\n", ""},
		{"SetFirst adds a missing key at the top",
			"# head\nlog: info\n", []edit{first("store_id", "S1")},
			"store_id: 'S1'\n# head\nlog: info\n", ""},
		{"SetFirst replaces an existing key in place",
			"log: info\nstore_id: S1\n", []edit{first("store_id", "S2")},
			"log: info\nstore_id: 'S2'\n", ""},
		{"a commented key is not the key",
			"ingest:\n  # token_file: /old\n  listen: x\n", []edit{set("ingest.token_file", "/t")},
			"ingest:\n  token_file: '/t'\n  # token_file: /old\n  listen: x\n", ""},
		{"nested key replaced, same key elsewhere untouched",
			"tls:\n  token_file: /x\ningest:\n  token_file: /y\n", []edit{set("ingest.token_file", "/t")},
			"tls:\n  token_file: /x\ningest:\n  token_file: '/t'\n", ""},
		{"nested key added with the section's indent",
			"ingest:\n    listen: x\n", []edit{set("ingest.token_file", "/t")},
			"ingest:\n    token_file: '/t'\n    listen: x\n", ""},
		{"missing section added at the end",
			"store_id: S1\n", []edit{set("ingest.token_file", "/t")},
			"store_id: S1\ningest:\n  token_file: '/t'\n", ""},
		{"three levels",
			"a:\n  b:\n    c: 1\n  d: 2\n", []edit{set("a.b.c", "x"), set("a.b.e", "y")},
			"a:\n  b:\n    e: 'y'\n    c: 'x'\n  d: 2\n", ""},
		{"a key in a block scalar is not a key",
			"note: |\n  ingest: text\ningest:\n  listen: x\n", []edit{set("ingest.listen", "y")},
			"note: |\n  ingest: text\ningest:\n  listen: 'y'\n", ""},
		{"inline parent refused",
			"ingest: {listen: x}\n", []edit{set("ingest.token_file", "/t")},
			"", "ingest is written inline"},
		{"list replaces items, keeps comments",
			"nats:\n  servers:\n    - nats://old:4222\n  # auth\n  user: \"\"\n", []edit{list("nats.servers", "nats://a:4222", "tls://b:4222")},
			"nats:\n  servers:\n    - 'nats://a:4222'\n    - 'tls://b:4222'\n  # auth\n  user: \"\"\n", ""},
		{"items at the key's indent belong to it",
			"servers:\n- nats://old:4222\nlog: info\n", []edit{list("servers")},
			"servers: []\nlog: info\n", ""},
		{"empty list",
			"nats:\n  servers: [a, b]\n", []edit{list("nats.servers")},
			"nats:\n  servers: []\n", ""},
		{"CRLF kept",
			"a: 1\r\nb:\r\n  c: 2\r\n", []edit{set("b.c", "3"), set("d", "4")},
			"a: 1\r\nb:\r\n  c: '3'\r\nd: '4'\r\n", ""},
		{"line break refused",
			"a: 1\n", []edit{set("a", "x\ny")}, "", "line break"},
		{"line break refused in a list",
			"a: []\n", []edit{list("a", "x\ry")}, "", "line break"},
		{"no final newline",
			"a: 1", []edit{set("a", "2")},
			"a: '2'\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tp := ParseTemplate([]byte(tc.in))
			var err error
			for _, e := range tc.edits {
				if err = e(tp); err != nil {
					break
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(tp.Bytes()); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestTemplateQuoting: whatever a value holds, the YAML parser reads back
// exactly that value.
func TestTemplateQuoting(t *testing.T) {
	for _, v := range []string{
		`C:\ProgramData\RxEdge\data`, `It's`, `''`, `"double"`, `a: b`, `nats://a:4222`,
		`x # not a comment`, `#start`, `- dash`, `[1, 2]`, `{a: b}`, `yes`, `null`, `~`, `0x10`,
		`&anchor`, `*alias`, `!tag`, `%`, `@`, "`", ` lead`, `trail `, `|`, `>`, ``,
	} {
		tp := ParseTemplate([]byte("ingest:\n  listen: x\nnats:\n  servers: []\n"))
		if err := tp.Set("ingest.token_file", v); err != nil {
			t.Fatal(err)
		}
		if err := tp.SetList("nats.servers", []string{v, v}); err != nil {
			t.Fatal(err)
		}
		var c struct {
			Ingest struct {
				Listen    string `yaml:"listen"`
				TokenFile string `yaml:"token_file"`
			} `yaml:"ingest"`
			NATS struct {
				Servers []string `yaml:"servers"`
			} `yaml:"nats"`
		}
		if err := yaml.Unmarshal(tp.Bytes(), &c); err != nil {
			t.Fatalf("%q: %v in\n%s", v, err, tp.Bytes())
		}
		if c.Ingest.TokenFile != v || c.Ingest.Listen != "x" || len(c.NATS.Servers) != 2 || c.NATS.Servers[0] != v || c.NATS.Servers[1] != v {
			t.Errorf("%q: read back %+v", v, c)
		}
	}
}
