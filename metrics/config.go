package metrics

import "github.com/rxedge/agent/internal/listen"

// Config is the metrics: section of the agent's configuration: a listener
// of its own for Prometheus, besides /metrics on the ingest listener.
type Config struct {
	// Listen is host:port; "" or "off" means no listener of its own.
	Listen    string `yaml:"listen"`
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
}

// ListenRule is the rule of metrics.listen: beyond loopback only with a
// token.
var ListenRule = listen.Rule{
	Field:   "metrics.listen",
	Example: "127.0.0.1:9717, or empty for none",
	Guard:   "also set metrics.token_file so that only your Prometheus can scrape",
}

// Validate checks the section. It returns the address to listen on (""
// for none), the bearer token ("" for none) and every problem, each
// naming its field.
func (c Config) Validate() (addr, token string, problems []string) {
	if c.Listen != "" && c.Listen != "off" {
		addr = c.Listen
		if err := ListenRule.Check(addr, c.Token != "" || c.TokenFile != ""); err != nil {
			problems = append(problems, err.Error())
		}
	}
	token, err := listen.Token("metrics", c.Token, c.TokenFile)
	if err != nil {
		problems = append(problems, err.Error())
	}
	return addr, token, problems
}
