package remote

import (
	"strings"
	"testing"
)

// The problems name the section the configuration used, so a file that
// still says control: is told about control.operator_keys.
func TestConfigNamesItsSection(t *testing.T) {
	const k1 = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	c := Config{OperatorKeys: []string{"nope", k1}, Operators: map[string]string{"alice": k1, "bob": "nope"}}
	for _, section := range []string{"remote", "control"} {
		keys, names, p := c.Validate(section)
		if len(keys) != 1 || keys[0] != k1 || names[k1] != "alice" {
			t.Errorf("%s: keys %v, names %v", section, keys, names)
		}
		want := []string{section + `.operator_keys: "nope" is not an NKey`, section + `.operators.bob: "nope" is not an NKey`}
		if len(p) != len(want) {
			t.Fatalf("%s: problems %q, want %q", section, p, want)
		}
		for i := range want {
			if !strings.HasPrefix(p[i], want[i]) {
				t.Errorf("%s: problem %q, want it to start %q", section, p[i], want[i])
			}
		}
	}
}
