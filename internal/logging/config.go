package logging

// Config is the log: section of the agent's configuration.
type Config struct {
	// Level is debug, info (the default), warn or error.
	Level string `yaml:"level"`
	// Format is JSON (the default) or Text.
	Format string `yaml:"format"`
}

// Validate fills in the defaults and returns every problem, each naming
// its field (log.level, log.format).
func (c Config) Validate() (Config, []string) {
	var p []string
	if c.Level == "" {
		c.Level = "info"
	}
	switch c.Level {
	case "debug", "info", "warn", "error":
	default:
		p = append(p, "log.level: must be debug, info, warn or error")
	}
	if c.Format == "" {
		c.Format = JSON
	}
	switch c.Format {
	case JSON, Text:
	default:
		p = append(p, "log.format: must be json or text")
	}
	return c, p
}
