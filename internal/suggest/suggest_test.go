package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"listen", "token", "token_file", "max_request_bytes"}
	for _, tt := range []struct{ name, want string }{
		{"tokne", "token"}, {"Token", "token"}, {"tokenfile", "token_file"}, {"lisen", "listen"},
		{"max_request", "max_request_bytes"}, {"color", ""}, {"x", ""},
	} {
		if got := Closest(tt.name, known); got != tt.want {
			t.Errorf("Closest(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}
