package installer

import (
	"fmt"
	"strings"
)

// checkPackagedImage checks the command line (image path) of a service a
// Windows Installer package registered: it must run p.Executable, quoted
// when the path has spaces (an unquoted "C:\Program Files\…" lets Windows
// try C:\Program.exe first), with exactly the arguments install prepares
// the config for.
func checkPackagedImage(image string, p *Plan) error {
	args := splitCommandLine(image)
	if len(args) == 0 || !strings.EqualFold(args[0], p.Executable) {
		return fmt.Errorf("installer: --msi: the service %s runs %q, not %s (quoted)", p.Paths.ServiceName, image, p.Executable)
	}
	if !strings.EqualFold(strings.Join(args[1:], "\x00"), strings.Join(p.Args, "\x00")) {
		return fmt.Errorf("installer: --msi: the service %s runs %q, not with the arguments %q this install prepares", p.Paths.ServiceName, image, p.Args)
	}
	return nil
}

// splitCommandLine splits a Windows command line as CommandLineToArgvW
// does: the program name ends at the closing quote or the first blank;
// in the arguments, 2n backslashes before a quote are n backslashes and
// the quote toggles quoting, 2n+1 are n and a literal quote, and other
// backslashes are literal.
func splitCommandLine(s string) []string {
	var out []string
	i := 0
	// The program name: no escapes.
	if strings.HasPrefix(s, `"`) {
		j := strings.IndexByte(s[1:], '"')
		if j < 0 {
			return []string{s[1:]}
		}
		out = append(out, s[1:1+j])
		i = j + 2
	} else {
		j := strings.IndexAny(s, " \t")
		if j < 0 {
			return []string{s}
		}
		out = append(out, s[:j])
		i = j
	}
	var b strings.Builder
	inArg, quoted := false, false
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\\':
			n := 0
			for i < len(s) && s[i] == '\\' {
				n++
				i++
			}
			if i < len(s) && s[i] == '"' {
				b.WriteString(strings.Repeat(`\`, n/2))
				if n%2 == 1 {
					b.WriteByte('"')
					i++
				}
			} else {
				b.WriteString(strings.Repeat(`\`, n))
			}
			inArg = true
			continue
		case c == '"':
			quoted = !quoted
			inArg = true
		case (c == ' ' || c == '\t') && !quoted:
			if inArg {
				out = append(out, b.String())
				b.Reset()
				inArg = false
			}
		default:
			b.WriteByte(c)
			inArg = true
		}
		i++
	}
	if inArg {
		out = append(out, b.String())
	}
	return out
}
