package remote

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
)

// Config is the section of the agent's configuration that says who may
// send this store commands.
type Config struct {
	// OperatorKeys are operator NKeys (U…) that may sign commands.
	OperatorKeys []string `yaml:"operator_keys"`
	// AllowUnsignedReads lets status and dlq.list through unsigned.
	AllowUnsignedReads bool `yaml:"allow_unsigned_reads"`
	// Operators names operators: name to NKey public key. Their keys may
	// sign too; the audit journal shows the name.
	Operators map[string]string `yaml:"operators"`
}

var (
	nkeyPattern  = regexp.MustCompile(`^U[A-Z2-7]{55}$`)
	operatorName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)
)

// Validate checks the section, named section in the configuration. It
// returns every key that may sign (OperatorKeys, then the named keys not
// among them, by name), each named key's name, and every problem, each
// naming its field (section.operator_keys, section.operators.NAME).
func (c Config) Validate(section string) (keys []string, names map[string]string, problems []string) {
	bad := func(field, format string, args ...any) {
		problems = append(problems, section+"."+field+": "+fmt.Sprintf(format, args...))
	}
	for _, k := range c.OperatorKeys {
		if !nkeyPattern.MatchString(k) {
			bad("operator_keys", "%q is not an NKey user public key (56 characters starting with U)", k)
			continue
		}
		keys = append(keys, k)
	}
	byName := make([]string, 0, len(c.Operators))
	for name := range c.Operators {
		byName = append(byName, name)
	}
	sort.Strings(byName)
	for _, name := range byName {
		k := c.Operators[name]
		switch {
		case !operatorName.MatchString(name):
			bad("operators", "%q is not a name: letters, digits, '.', '-', '_' and '@', at most 64", name)
		case !nkeyPattern.MatchString(k):
			bad("operators."+name, "%q is not an NKey user public key (56 characters starting with U)", k)
		case names[k] != "":
			bad("operators."+name, "the key is also named %q: one name per key", names[k])
		default:
			if names == nil {
				names = map[string]string{}
			}
			names[k] = name
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys, names, problems
}
