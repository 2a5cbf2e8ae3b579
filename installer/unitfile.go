package installer

import "strings"

// execStartArgs returns the arguments after the binary in a unit's
// ExecStart line, undoing the quoting of kardianos's cmd function.
func execStartArgs(unit string) []string {
	for _, line := range strings.Split(unit, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart=")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return nil
		}
		args := f[1:]
		for i, a := range args {
			if len(a) >= 2 && a[0] == '"' && a[len(a)-1] == '"' {
				args[i] = strings.ReplaceAll(a[1:len(a)-1], `\"`, `"`)
			}
		}
		return args
	}
	return nil
}
