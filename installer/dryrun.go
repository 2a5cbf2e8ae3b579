package installer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// CheckDry runs the plan's Check on the config install would use, as
// install does, and changes nothing: an existing config as it is; a new
// one written, with a token file of its own, into a temporary directory
// that is removed afterwards. A dry run thus refuses what install would
// refuse.
func (p *Plan) CheckDry() error {
	if p.Check == nil {
		return nil
	}
	if _, err := os.Stat(p.Config.Path); err == nil {
		if err := p.Check(p.Config.Path); err != nil {
			return fmt.Errorf("installer: the existing %s is not valid, so install would refuse: %w", p.Config.Path, err)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("installer: cannot tell whether %s exists (%w): run the dry run as an administrator to check it", p.Config.Path, err)
	}
	dir, err := os.MkdirTemp("", "rxedge-dry-run-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tok := filepath.Join(dir, "ingest.token")
	if err := os.WriteFile(tok, newToken(), 0o600); err != nil {
		return err
	}
	t := ParseTemplate(p.Config.Content)
	t.Set("ingest.token_file", tok) // a config without the key has no token file to stand in for
	cfg := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfg, t.Bytes(), 0o600); err != nil {
		return err
	}
	if err := p.Check(cfg); err != nil {
		return fmt.Errorf("installer: install would refuse the config it writes to %s: %w", p.Config.Path, err)
	}
	return nil
}

// secretLine matches a YAML line that sets a secret: a password or a
// token, set to something.
var secretLine = regexp.MustCompile(`(?m)^(\s*(?:password|token)\s*:\s*)(\S.*)$`)

// redactSecrets replaces the value of every password and token line of a
// config (an empty "" stays as it is: it says none is set).
func redactSecrets(text string) string {
	return secretLine.ReplaceAllStringFunc(text, func(line string) string {
		m := secretLine.FindStringSubmatch(line)
		if v := m[2]; v == `""` || v == `''` {
			return line
		}
		return m[1] + `"<redacted>"`
	})
}
