package doctor

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/intake/asap"
	"github.com/rxedge/agent/settings"
)

// Check names of the intakes, reported only when configured.
const (
	CheckHL7  = "hl7 listener"
	CheckASAP = "asap folder"
)

// intakeChecks checks the HL7 listener (it accepts connections, its
// certificate loads) and the ASAP drop folder (it exists, the agent can
// write in it and its done/ and rejected/ folders, and it is not on a
// network share, whose renames may not be durable).
func intakeChecks(ctx context.Context, o Options, opts settings.Options) []Check {
	var out []Check
	if in := opts.Intake.HL7; in.Listen != "" {
		out = append(out, hl7Check(ctx, o, in))
	}
	if dir := opts.Intake.ASAP.Dir; dir != "" {
		out = append(out, asapCheck(o, dir))
	}
	return out
}

func hl7Check(ctx context.Context, o Options, in intake.HL7Options) Check {
	c := Check{Name: CheckHL7}
	if in.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(in.CertFile, in.KeyFile); err != nil {
			c.Detail = fmt.Sprintf("intake.hl7.cert_file, key_file: %v", err)
			c.Fix = "point intake.hl7.cert_file and key_file at a readable PEM certificate and its key"
			return c
		}
	}
	addr := dialable(in.Listen)
	d := net.Dialer{Timeout: o.Timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		c.Detail = fmt.Sprintf("nothing accepts connections on %s: %v", addr, err)
		c.Fix = fmt.Sprintf("start the agent (`%s start`); if it runs, see its log for HL7_ or a port already in use", o.Command)
		return c
	}
	conn.Close()
	c.OK = true
	c.Detail = "accepting connections on " + in.Listen
	if in.CertFile != "" {
		c.Detail += " (TLS)"
	}
	return c
}

// dialable turns a wildcard listen address into one a local client can
// dial.
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func asapCheck(o Options, dir string) Check {
	c := Check{Name: CheckASAP}
	fix := fmt.Sprintf("run `%s install` (it creates %s for the service), or create it writable by the service's user", o.Command, dir)
	for _, d := range []string{dir, filepath.Join(dir, asap.DoneDir), filepath.Join(dir, asap.RejectedDir)} {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() {
			c.Detail, c.Fix = fmt.Sprintf("%s: not a directory (%v)", d, err), fix
			return c
		}
		if err := writable(d); err != nil {
			c.Detail, c.Fix = fmt.Sprintf("%s: cannot write in it (%v)", d, err), fix
			return c
		}
	}
	if remote, kind := networkShare(dir); remote {
		c.Detail = fmt.Sprintf("%s is on a network share (%s): a move to done/ there may not survive a power cut", dir, kind)
		c.Fix = "point intake.asap.dir at a folder on a local disk"
		return c
	}
	c.OK, c.Detail = true, dir+" present, writable, on a local disk"
	return c
}

// writable creates and removes a probe file whose name begins with '.',
// which the drop folder never takes.
func writable(dir string) error {
	p := filepath.Join(dir, ".rxedge-doctor-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(p)
}
