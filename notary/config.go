package notary

import (
	"path/filepath"
	"time"
)

// DefaultInterval is the default checkpoint interval: every movement
// acknowledged is covered by a signed checkpoint within it.
const DefaultInterval = time.Minute

// MinInterval bounds the interval below: each checkpoint is a message
// central archives.
const MinInterval = time.Second

// Config is the ledger: section of the agent's configuration.
type Config struct {
	// KeyFile is the store's signing key; default ledger.key in the
	// data directory.
	KeyFile string `yaml:"key_file"`
	// CheckpointInterval is how often the store signs a checkpoint when
	// its log grew; default DefaultInterval.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
}

// Settings is the validated section.
type Settings struct {
	KeyFile            string // absolute
	CheckpointInterval time.Duration
}

// Validate checks the section, named section, for an agent whose data
// directory is dataDir, and fills in the defaults. It returns every
// problem, each naming its field.
func (c Config) Validate(section, dataDir string) (Settings, []string) {
	s := Settings{KeyFile: c.KeyFile, CheckpointInterval: c.CheckpointInterval}
	var problems []string
	if s.KeyFile == "" {
		s.KeyFile = filepath.Join(dataDir, KeyFileName)
	} else if abs, err := filepath.Abs(s.KeyFile); err != nil {
		problems = append(problems, section+".key_file: "+err.Error())
	} else {
		s.KeyFile = abs
	}
	switch {
	case s.CheckpointInterval == 0:
		s.CheckpointInterval = DefaultInterval
	case s.CheckpointInterval < MinInterval:
		problems = append(problems, section+".checkpoint_interval: must be at least 1s (e.g. 1m, the default)")
	}
	return s, problems
}
