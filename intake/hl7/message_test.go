package hl7

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestUnescape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`plain`, `plain`},
		{`a\F\b`, `a|b`},
		{`a\S\b\T\c\R\d\E\e`, `a^b&c~d\e`},
		{`\X41424344\`, `ABCD`},
		{`\Xc3a9\`, `é`},
		{`x\H\bold\N\y`, `xboldy`},
		{`line\.br\next`, `linenext`},
		{`\C2842\text`, `text`},
	} {
		got, ok := Standard.Unescape(c.in)
		if !ok || got != c.want {
			t.Errorf("Unescape(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
	for _, bad := range []string{`a\F`, `\Q\`, `\X4\`, `\XZZ\`, `\Xff\`, `\\`} {
		if got, ok := Standard.Unescape(bad); ok {
			t.Errorf("Unescape(%q) = %q, accepted", bad, got)
		}
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, s := range []string{"a|b^c&d~e\\f", "x\ry\nz", "plain", ""} {
		enc := Standard.Encode(s)
		if strings.ContainsAny(enc, "|^&~\r\n") {
			t.Errorf("Encode(%q) = %q holds a delimiter", s, enc)
		}
		got, ok := Standard.Unescape(enc)
		if !ok || got != s {
			t.Errorf("Unescape(Encode(%q)) = %q, %v", s, got, ok)
		}
	}
}

// A sender may choose its own delimiters: MSH-1 and MSH-2 say which.
func TestDelimitersFromMSH(t *testing.T) {
	msg := "MSH#:*!$#APP#FAC#RX#S1#20260301093000##RDS:O13:RDS_O13#C1#P#2.5.1\r" +
		"RXD#1#12345-6789-01:Drug:NDC#202603010930#10#EA##RX!F!1*RX2$sub\r"
	m, err := Parse([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	if m.Enc != (Encoding{'#', ':', '*', '!', '$'}) {
		t.Fatalf("encoding %+v", m.Enc)
	}
	rxd := m.Find("RXD")[0]
	for _, c := range []struct {
		f, rep, comp, sub int
		want              string
	}{
		{2, 1, 1, 0, "12345-6789-01"},
		{2, 1, 3, 0, "NDC"},
		{7, 1, 0, 0, "RX#1"},
		{7, 2, 1, 1, "RX2"},
		{7, 2, 1, 2, "sub"},
	} {
		got, err := m.Get(rxd, c.f, c.rep, c.comp, c.sub)
		if err != nil || got != c.want {
			t.Errorf("RXD-%d rep %d comp %d sub %d = %q, %v; want %q", c.f, c.rep, c.comp, c.sub, got, err, c.want)
		}
	}
	if n := m.Repetitions(rxd, 7); n != 2 {
		t.Errorf("RXD-7 repetitions = %d, want 2", n)
	}
	typ, _ := m.Get(m.MSH(), 9, 1, 2, 0)
	ctl, _ := m.Get(m.MSH(), 10, 1, 0, 0)
	if typ != "O13" || ctl != "C1" {
		t.Errorf("MSH-9.2 %q MSH-10 %q", typ, ctl)
	}
}

func TestParseRefusesWithPlaceOnly(t *testing.T) {
	const marker = "SECRETVALUE"
	for name, msg := range map[string]string{
		"no MSH":          "PID|1||" + marker + "\r",
		"bad encoding":    "MSH|^~|APP\r",
		"same delimiters": "MSH|^^\\&|APP\r",
		"bad segment id":  "MSH|^~\\&|APP\r" + marker + "|x\r",
		"not utf-8":       "MSH|^~\\&|APP\r" + "PID|\xff" + marker + "\r",
		"second MSH":      "MSH|^~\\&|APP\rMSH|^~\\&|" + marker + "\r",
	} {
		_, err := Parse([]byte(msg))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: Parse = %v, want *Error", name, err)
			continue
		}
		if strings.Contains(err.Error(), marker) {
			t.Errorf("%s: error %q holds a value", name, err)
		}
	}
}

func TestParseTime(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	for _, c := range []struct {
		in   string
		want string
	}{
		{"202603010930", "2026-03-01T09:30:00-05:00"},
		{"20260301093015", "2026-03-01T09:30:15-05:00"},
		{"20260301093015.25", "2026-03-01T09:30:15.25-05:00"},
		{"20260301093015+0100", "2026-03-01T09:30:15+01:00"},
		{"202607010930-0400", "2026-07-01T09:30:00-04:00"},
	} {
		got, ok := ParseTime(c.in, ny)
		if !ok || got.Format(time.RFC3339Nano) != c.want {
			t.Errorf("ParseTime(%s) = %s, %v; want %s", c.in, got.Format(time.RFC3339Nano), ok, c.want)
		}
	}
	for _, bad := range []string{"", "20260301", "2026030109", "202613010930", "202602300930", "20260301093015+99", "abcdefghijkl", "20260301093015.12345"} {
		if _, ok := ParseTime(bad, ny); ok {
			t.Errorf("ParseTime(%q) accepted", bad)
		}
	}
}

func frames(t *testing.T, in []byte, max int) (msgs []string, skipped int64, last error) {
	t.Helper()
	fr := NewFrameReader(bytes.NewReader(in), max)
	for {
		m, err := fr.Next()
		if err != nil && !errors.Is(err, ErrFrame) {
			return msgs, fr.Skipped, err
		}
		msgs = append(msgs, string(m))
	}
}

func TestFrameReader(t *testing.T) {
	var in []byte
	in = append(in, "noise before\r\n"...)
	in = AppendFrame(in, []byte("MSH|one"))
	in = append(in, "\r\njunk"...)
	in = AppendFrame(in, []byte("MSH|two"))
	// A sender restarting mid-frame: the partial frame is dropped.
	in = append(in, StartBlock)
	in = append(in, "MSH|cut"...)
	in = AppendFrame(in, []byte("MSH|three"))
	msgs, skipped, err := frames(t, in, 100)
	if err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if strings.Join(msgs, ",") != "MSH|one,MSH|two,MSH|three" {
		t.Fatalf("frames %q", msgs)
	}
	if want := int64(len("noise before\r\n") + len("\r\njunk") + 1 + len("MSH|cut")); skipped != want {
		t.Errorf("skipped %d, want %d", skipped, want)
	}

	big := AppendFrame(nil, bytes.Repeat([]byte("x"), 101))
	if _, _, err := frames(t, big, 100); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a 101-byte frame under a 100-byte bound: %v, want ErrTooLarge", err)
	}
	exact := AppendFrame(nil, bytes.Repeat([]byte("x"), 100))
	if msgs, _, err := frames(t, exact, 100); err != io.EOF || len(msgs) != 1 {
		t.Errorf("a 100-byte frame under a 100-byte bound: %d frames, %v", len(msgs), err)
	}
	cut := append([]byte{StartBlock}, "MSH|half"...)
	if _, _, err := frames(t, cut, 100); err != io.ErrUnexpectedEOF {
		t.Errorf("a frame cut short: %v, want io.ErrUnexpectedEOF", err)
	}
	// An end block without its CR is answered (as malformed), and the next
	// frame, whose start block followed at once, still read.
	bad := append([]byte{StartBlock}, "MSH|a"...)
	bad = append(bad, EndBlock)
	bad = AppendFrame(bad, []byte("MSH|b"))
	if msgs, _, err := frames(t, bad, 100); err != io.EOF || strings.Join(msgs, ",") != "MSH|a,MSH|b" {
		t.Errorf("end block without CR: %q, %v", msgs, err)
	}
}

// FuzzParse checks that decoding any bytes neither panics nor yields a
// value longer than the message, and that it allocates within the bound
// (decodeBytesPerByte a byte, plus decodeBytesFixed).
func FuzzParse(f *testing.F) {
	f.Add([]byte(rds("C1", "RX1", "1", "12345-6789-01", "10", "EA", "II")))
	f.Add([]byte("MSH#:*!$#A#B\rRXD#1#x:y\r"))
	f.Add([]byte("MSH|^~\\&|A\rRXD|1|\\X41\\|\\F\\\\S\\"))
	f.Add([]byte("MSH|^~\\&|" + strings.Repeat("|", 400)))
	f.Add([]byte("MSH|^~\\&|" + strings.Repeat("\rZ00", 300)))
	f.Add([]byte("MSH|^~\\&|A|B|C|D|1||RDS^O13|C|P|2.5" + strings.Repeat("\rRXD|1|1234-5678-90|202603010930|1|EA||R", 50)))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeBound(t, b)
		m, err := Parse(b)
		if err != nil {
			return
		}
		for i := range m.Segments {
			s := &m.Segments[i]
			for n := range min(s.Fields()+1, 40) {
				v, err := m.Get(s, n, 1, 1, 1)
				if err == nil && len(v) > len(b) {
					t.Fatalf("decoded value longer than the message")
				}
			}
		}
		Dispenses(m, nil, time.UTC)
	})
}

// FuzzFrame checks that framing any bytes never panics, never returns a
// frame over the bound or holding a framing byte, never returns more
// frame bytes than it read, and allocates at most the read buffer and
// three times the largest frame it may hold.
func FuzzFrame(f *testing.F) {
	f.Add(AppendFrame([]byte("x"), []byte("MSH|a")), 64)
	f.Add([]byte{StartBlock, EndBlock, CR, StartBlock, 'a', EndBlock}, 8)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		if max <= 0 || max > 1<<16 {
			max = 64
		}
		n := allocated(func() {
			fr := NewFrameReader(bytes.NewReader(b), max)
			for {
				if _, err := fr.Next(); err != nil && !errors.Is(err, ErrFrame) {
					return
				}
			}
		})
		if limit := uint64(frameReadBuffer + 3*min(len(b), max) + 4<<10); n > limit {
			t.Fatalf("framing %d bytes (frames of at most %d) allocated %d bytes, more than %d", len(b), max, n, limit)
		}
		fr := NewFrameReader(bytes.NewReader(b), max)
		total := 0
		for {
			m, err := fr.Next()
			if err != nil && !errors.Is(err, ErrFrame) {
				break
			}
			if len(m) > max {
				t.Fatalf("frame of %d bytes over the bound %d", len(m), max)
			}
			if bytes.IndexByte(m, StartBlock) >= 0 || bytes.IndexByte(m, EndBlock) >= 0 {
				t.Fatalf("a frame holds a framing byte")
			}
			total += len(m)
			if total > len(b) {
				t.Fatalf("more frame bytes than input")
			}
		}
	})
}
