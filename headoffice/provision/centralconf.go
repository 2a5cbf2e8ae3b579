package provision

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/migrate"
)

// CentralAccount is the account of the generated configuration that holds
// central's streams, operators and administrator; AuditAccount holds the
// auditor; WitnessAccount holds head office's witness.
const (
	CentralAccount = "RX"
	AuditAccount   = "AUDIT"
	WitnessAccount = "WITNESS"
)

// reservedAccounts are the names of the template's own accounts, and the
// fleet token, which no store may take.
var reservedAccounts = []string{"RX", "SYS", "AUDIT", "WITNESS", "admin", "audit", "migrate", "ops", "sys", "witness", central.FleetToken}

// ReadRosterFile is ReadRoster of the file at path; its errors name the
// flag that gave it, --roster.
func ReadRosterFile(path string) ([]string, error) {
	r, err := ParseRosterFile(path)
	if err != nil {
		return nil, err
	}
	return r.Stores, nil
}

// ParseRosterFile is ParseRoster of the file at path; its errors name the
// flag that gave it, --roster.
func ParseRosterFile(path string) (*Roster, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--roster: %w", err)
	}
	defer f.Close()
	r, err := ParseRoster(f)
	if err != nil {
		return nil, fmt.Errorf("--roster %s: %w", path, err)
	}
	return r, nil
}

// ReadRoster reads a roster's store ids (see ParseRoster).
func ReadRoster(r io.Reader) ([]string, error) {
	ro, err := ParseRoster(r)
	if err != nil {
		return nil, err
	}
	return ro.Stores, nil
}

// Roster is the list of stores the server configuration is generated
// from, with each store's checkpoint verifier keys (central/ledger).
type Roster struct {
	// Stores are the store ids, in the roster's order.
	Stores    []string
	keys      map[string][]string
	verifiers map[string][]note.Verifier
	places    map[string]Place
}

// Place is where a roster puts a store: its region and its tags, for
// head office's views to filter by. Neither is a secret or a name of a
// person: the roster says what a chain calls its groups of stores.
type Place struct {
	Region string
	Tags   []string
}

// Place is the region and the tags the roster gives store (none for a
// nil roster).
func (r *Roster) Place(store string) Place {
	if r == nil {
		return Place{}
	}
	p := r.places[store]
	p.Tags = slices.Clone(p.Tags)
	return p
}

// Limits of a roster's attributes.
const (
	// MaxTags bounds the tags of one store.
	MaxTags = 16
)

// attrValue is a region's or a tag's value: what a chain names a group
// of stores with, in an alphabet that needs no escaping anywhere.
var attrValue = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)

// parseAttrs takes the attributes (region=…, tag=…) out of a line's
// fields into p and returns the other fields, or why the line is
// refused.
func parseAttrs(f []string, p *Place) ([]string, string) {
	rest := f[:0:0]
	for _, field := range f {
		name, value, ok := strings.Cut(field, "=")
		if !ok {
			rest = append(rest, field)
			continue
		}
		if !attrValue.MatchString(value) {
			return nil, "an attribute's value is letters, digits, '.', '_' and '-', at most 32"
		}
		switch name {
		case "region":
			if p.Region != "" && p.Region != value {
				return nil, "the store is given two regions"
			}
			p.Region = value
		case "tag":
			if !slices.Contains(p.Tags, value) {
				p.Tags = append(p.Tags, value)
			}
			if len(p.Tags) > MaxTags {
				return nil, fmt.Sprintf("the store has more than %d tags", MaxTags)
			}
		default:
			return nil, "an attribute is region=NAME or tag=NAME"
		}
	}
	return rest, ""
}

// MaxRosterLine bounds a roster line (a store id and a verifier key take
// under 100 bytes).
const MaxRosterLine = 4096

// Keys are the verifier keys a roster lists for store, in its order
// (several while a key is rotated; none when it lists none).
func (r *Roster) Keys(store string) []string { return slices.Clone(r.keys[store]) }

// StoreVerifiers are the verifiers of Keys(store); none for a nil roster.
func (r *Roster) StoreVerifiers(store string) []note.Verifier {
	if r == nil {
		return nil
	}
	return slices.Clone(r.verifiers[store])
}

// Verifiers are the verifier keys of every store of the roster, for
// ledger.Open (which accepts a checkpoint only when signed by a key named
// for its own store).
func (r *Roster) Verifiers() note.Verifiers {
	var vs []note.Verifier
	for _, s := range r.Stores {
		vs = append(vs, r.verifiers[s]...)
	}
	return note.VerifierList(vs...)
}

// ParseRoster reads a roster: one store id per line, optionally followed
// by one of the store's checkpoint verifier keys ("S0042 <vkey>", the
// key `agent status` shows as ledger.public_key); several lines of one
// store, each with a key, give it several keys (a key being rotated).
// A line may also give the store's region and tags (region=NAME,
// tag=NAME, anywhere after the id, on any of its lines; see Place):
// rosters without them read as before, and a roster with them is refused
// by a version that does not know them. Blank lines and everything after
// a # are ignored. It refuses invalid,
// reserved and repeated ids, keys that are not note verifier keys named
// for their store (ledger.KeyName), a key listed twice, and a line over
// MaxRosterLine bytes. Its errors name the lines, never their content.
func ParseRoster(rd io.Reader) (*Roster, error) {
	var (
		r    = &Roster{keys: map[string][]string{}, verifiers: map[string][]note.Verifier{}, places: map[string]Place{}}
		bad  []string
		seen = map[string]bool{} // store ids on lines with no key
		n    = 0
	)
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 512), MaxRosterLine)
	for n = 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		id := f[0]
		place := r.places[id]
		f, why := parseAttrs(f, &place)
		if why != "" {
			bad = append(bad, fmt.Sprintf("line %d: %s", n, why))
			continue
		}
		listed := slices.Contains(r.Stores, id)
		switch {
		case len(f) > 2:
			bad = append(bad, fmt.Sprintf("line %d: a line is a store id and at most one verifier key", n))
			continue
		case slices.Contains(reservedAccounts, id):
			bad = append(bad, fmt.Sprintf("line %d: the id is reserved (a name of the configuration's own accounts or users)", n))
			continue
		case !central.ValidStoreID(id):
			bad = append(bad, fmt.Sprintf("line %d: not a store id (letters, digits, _ and -, at most 32)", n))
			continue
		case listed && (len(f) == 1 || seen[id]):
			bad = append(bad, fmt.Sprintf("line %d: the store is listed twice (a store repeats only on lines that each give one of its keys)", n))
			continue
		}
		if len(f) == 1 {
			seen[id] = true
		} else {
			v, err := note.NewVerifier(f[1])
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("line %d: the key is not a note verifier key (agent status shows it as ledger.public_key)", n))
				continue
			case v.Name() != ledger.KeyName(id):
				bad = append(bad, fmt.Sprintf("line %d: the key is not named for the store on its line (ledger.KeyName): it is not that store's key", n))
				continue
			case slices.Contains(r.keys[id], f[1]):
				bad = append(bad, fmt.Sprintf("line %d: the store's key is listed twice", n))
				continue
			}
			r.keys[id] = append(r.keys[id], f[1])
			r.verifiers[id] = append(r.verifiers[id], v)
		}
		if !listed {
			r.Stores = append(r.Stores, id)
		}
		if place.Region != "" || len(place.Tags) > 0 {
			r.places[id] = place
		}
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("roster: line %d: over %d bytes", n, MaxRosterLine)
	} else if err != nil {
		return nil, fmt.Errorf("roster: %w", err)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("roster:\n  %s", strings.Join(bad, "\n  "))
	}
	if len(r.Stores) == 0 {
		return nil, fmt.Errorf("roster: no store ids")
	}
	return r, nil
}

// migrateGrants are the migrating user's grants for n partitions; none
// for one partition, which has nothing to move into.
func migrateGrants(n int) []string {
	if n <= 1 {
		return nil
	}
	return migrate.Grants(central.StreamName, n)
}

// CentralConfig writes the production nats-server configuration for the
// stores of a roster and a central of partitions partitions (0 means 1;
// configs/nats/production.conf.template is its output for S0001 and S0002
// with one partition): one account per store, which holds only that
// store's user and imports only that store's services from the central
// account RX, where the streams, the operators and the administrator live.
// A store can then reach nothing of another store's, not even through the
// reply subject of a JetStream request: the server answers into the
// requester's own account. The auditor has an account of its own, AUDIT,
// for the same reason: it imports from RX only the reads of the archives,
// of the witness stream and of the fleet view, and from each store only
// the commands reconcile and ledger. Head office's witness has the account
// WITNESS: it imports the reads of the archives and of the witness stream
// and the publishing of countersigned checkpoints; no other user may
// publish those.
//
// With more than one partition each store account's imports map the
// subjects an agent uses, which do not change, onto its partition's
// (central.Partition): rx.mv.<store>.> onto rx.mvp.<p>.<store>.>, and the
// direct get of RX_MOVEMENTS onto that of RX_MOVEMENTS_<p>.
func CentralConfig(w io.Writer, stores []string, partitions int) error {
	n := max(partitions, 1)
	if n > central.MaxPartitions {
		return fmt.Errorf("central config: %d partitions, at most %d", n, central.MaxPartitions)
	}
	var (
		ss    []confStore
		parts []confPartition
	)
	for _, id := range stores {
		p := central.Partition(id, n)
		ss = append(ss, confStore{
			ID: id, Partitioned: n > 1,
			Movements:      central.PartitionSubject(p, n, id, ">"),
			LocalMovements: central.Subject(id, ">"),
			DirectGet:      central.PartitionDirectGetSubject(p, n, id, ">"),
			LocalDirectGet: central.DirectGetSubject(central.Subject(id, ">")),
			FleetGet:       central.FleetDirectGetSubject(id),
		})
	}
	for p := range n {
		parts = append(parts, confPartition{Stream: central.MovementStream(p, n), Archive: central.ArchiveStream(p, n)})
	}
	var b bytes.Buffer
	err := centralTemplate.Execute(&b, struct {
		Stores                                   []confStore
		Partitions                               []confPartition
		Streams, FleetStream, Fleet, Status, Ctl string
		Reconcile, ReconcileAll, AuditAPI        string
		Ledger, LedgerAll                        string
		Witness, WitnessSubjects, WitnessAPI     string
		Migrate                                  []string
		AuditArchives                            []confPartition
	}{
		Stores: ss, Partitions: parts, Streams: streamList(parts), Migrate: migrateGrants(n), AuditArchives: auditArchives(n),
		FleetStream: central.FleetStreamName, Fleet: central.FleetSubject("STORE"),
		Status: central.StatusSubject("STORE"), Ctl: command.Subject("STORE", ">"),
		Reconcile: command.Subject("STORE", "reconcile"), ReconcileAll: command.Subject("*", "reconcile"),
		Ledger: command.Subject("STORE", command.CmdLedger), LedgerAll: command.Subject("*", command.CmdLedger),
		AuditAPI: central.AuditAPIPrefix,
		Witness:  central.WitnessStreamName, WitnessSubjects: central.WitnessPrefix + ">", WitnessAPI: central.WitnessAPIPrefix,
	})
	if err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}

// confStore is one store of the generated configuration: the subjects RX
// exports to it, and the ones its agent uses, which its imports map them to.
type confStore struct {
	ID                                                   string
	Partitioned                                          bool
	Movements, LocalMovements, DirectGet, LocalDirectGet string
	// FleetGet reads back the store's own fleet-view summary, which its
	// agent asks at start for the highest sequence its store gave.
	FleetGet string
}

// confPartition names one partition's streams.
type confPartition struct{ Stream, Archive string }

// auditArchives are the archives the auditor reads (central.ArchiveStreams).
func auditArchives(n int) []confPartition {
	var out []confPartition
	for _, a := range central.ArchiveStreams(n) {
		out = append(out, confPartition{Archive: a})
	}
	return out
}

// streamList names every movement stream and archive for the template's
// header.
func streamList(parts []confPartition) string {
	var names []string
	for _, p := range parts {
		names = append(names, p.Stream, p.Archive)
	}
	return strings.Join(names, ", ")
}

var centralTemplate = template.Must(template.New("central").Funcs(template.FuncMap{
	"for": func(pattern, store string) string { return strings.ReplaceAll(pattern, "STORE", store) },
}).Parse(`# nats-server configuration for the RxEdge central: JetStream on disk with
# every acknowledged write fsynced, and one account per store, so that no
# store identity can reach, spoof or flood another (DESIGN §5, P7).
#
# Generated by ` + "`hq central-config --roster FILE [--partitions N]`" + ` from a
# roster (one store id per line); this copy is its output for the example
# stores S0001 and S0002 with one partition. Regenerate it when a store
# joins or leaves, then:
#   1. replace every CHANGE-ME password (or switch to NKeys, see the end);
#   2. set store_dir and, for a cluster, the cluster block;
#   3. enable TLS: without it passwords cross the network in clear text;
#   4. run ` + "`hq provision --server URL --user admin …`" + ` (replicas 3 on a
#      cluster, the same --partitions) to create the streams
#      {{.Streams}}, {{.FleetStream}} and {{.Witness}}.
#
# Any value may come from the environment instead: ` + "`password: $S0001_PASS`" + `
# reads the variable S0001_PASS when the server starts.
#
# Why one account per store: JetStream sends its answers (publish acks,
# direct gets, API answers) to whatever reply subject the requester names,
# and the server checks a publish's subject against permissions but not its
# reply subject. With every store in one account, a store could make the
# server deliver bytes to another store's control subjects or inbox, and
# even feed a stored message of its own to the JetStream API as a request
# (a consumer that delivers every store's movements to it). Across an
# account boundary the server rewrites the reply subject, and the answer
# comes back into the requester's own account, where only it listens.
#
# Naming rule: each user receives replies only on its own inbox prefix,
# _INBOX_<user> (nats.go: nats.CustomInboxPrefix("_INBOX_S0001"); nats CLI:
# --inbox-prefix; ` + "`hq provision`" + ` and ` + "`hq remote`" + ` use _INBOX_<user> when
# given --user).
#
# Permissions are allow-lists: everything not listed is denied. Do not add
# an explicit ` + "`deny: \"$JS.API.>\"`" + `: a deny wins over an allow, and it would
# also block the direct gets below.

server_name: central-1
listen: 0.0.0.0:4222

jetstream {
  # Where the streams' files go: a dedicated, local disk.
  store_dir: "REPLACE_WITH_STORE_DIR"

  # fsync every write before acknowledging it. JetStream's default syncs
  # every two minutes, and a power loss then drops writes it already
  # acknowledged, which the agents have counted as delivered.
  sync_interval: always
}

# tls {
#   cert_file: "server-cert.pem"
#   key_file:  "server-key.pem"
#   # ca_file: "ca.pem"   # and ` + "`verify: true`" + ` for client certificates
# }

# A three-node cluster holds the streams with three replicas. Give each
# node its own server_name and the same cluster name and routes.
# cluster {
#   name: rxedge-central
#   listen: 0.0.0.0:6222
#   routes: [
#     nats-route://central-1:6222
#     nats-route://central-2:6222
#     nats-route://central-3:6222
#   ]
# }

accounts {
  # Central: the streams, the operators and the administrator. It offers
  # each store, and only that store, the services it needs, the auditor
  # its reads, and takes each store's control service and heartbeat.
  RX {
    jetstream: enabled
    users: [
      # Creates and updates the streams (` + "`hq provision`" + `); nothing else.
      {
        user: admin
        password: "CHANGE-ME-admin"
        permissions: {
          publish: {
            allow: [
{{- range .Partitions}}
              "$JS.API.STREAM.INFO.{{.Stream}}"
              "$JS.API.STREAM.CREATE.{{.Stream}}"
              "$JS.API.STREAM.UPDATE.{{.Stream}}"
              "$JS.API.STREAM.INFO.{{.Archive}}"
              "$JS.API.STREAM.CREATE.{{.Archive}}"
              "$JS.API.STREAM.UPDATE.{{.Archive}}"
{{- end}}
              "$JS.API.STREAM.INFO.{{.FleetStream}}"
              "$JS.API.STREAM.CREATE.{{.FleetStream}}"
              "$JS.API.STREAM.INFO.{{.Witness}}"
              "$JS.API.STREAM.CREATE.{{.Witness}}"
              "$JS.API.STREAM.UPDATE.{{.Witness}}"
            ]
          }
          subscribe: { allow: ["_INBOX_admin.>"] }
        }
      }

      # An operator: sends signed control commands to stores, reads the
      # fleet view and watches heartbeats; hq's console and fleet watch
      # follow the fleet view with ordered consumers (no durable state).
      # Reads no movements and not the witness stream (the auditor
      # does). Every
      # command must also be signed with an operator NKey listed in the
      # store's remote.operator_keys: this grant alone cannot change or
      # read a store.
      {
        user: ops
        password: "CHANGE-ME-ops"
        permissions: {
          publish: {
            allow: [
              "rx.ctl.>"
              "$JS.API.DIRECT.GET.{{.FleetStream}}"
              "$JS.API.DIRECT.GET.{{.FleetStream}}.>"
              "$JS.API.STREAM.INFO.{{.FleetStream}}"
              "$JS.API.CONSUMER.CREATE.{{.FleetStream}}.>"
              "$JS.API.CONSUMER.MSG.NEXT.{{.FleetStream}}.*"
              "$JS.API.CONSUMER.INFO.{{.FleetStream}}.*"
              "$JS.API.CONSUMER.DELETE.{{.FleetStream}}.*"
            ]
          }
          subscribe: { allow: ["_INBOX_ops.>", "rx.status.>"] }
        }
      }
{{- if .Migrate}}

      # Moves a one-partition central's movements into the partitions
      # (` + "`hq migrate`" + `, docs/headoffice.md "Moving to a partitioned central"):
      # reads RX_MOVEMENTS, publishes into the partitions. Remove this
      # user once the move is done and reconciled.
      {
        user: migrate
        password: "CHANGE-ME-migrate"
        permissions: {
          publish: {
            allow: [
{{- range .Migrate}}
              "{{.}}"
{{- end}}
            ]
          }
          subscribe: { allow: ["_INBOX_migrate.>"] }
        }
      }
{{- end}}

    ]
    exports: [
      # The auditor and the witness: their reads of the archives and of
      # the witness stream (a pull consumer's next request is answered by
      # many messages); the auditor's of the fleet view.
{{- range .AuditArchives}}
      { service: "$JS.API.STREAM.INFO.{{.Archive}}", accounts: [AUDIT, WITNESS] }
      { service: "$JS.API.CONSUMER.CREATE.{{.Archive}}.>", accounts: [AUDIT, WITNESS] }
      { service: "$JS.API.CONSUMER.MSG.NEXT.{{.Archive}}.*", accounts: [AUDIT, WITNESS], response: stream }
      { service: "$JS.API.CONSUMER.INFO.{{.Archive}}.*", accounts: [AUDIT, WITNESS] }
      { service: "$JS.API.CONSUMER.DELETE.{{.Archive}}.*", accounts: [AUDIT, WITNESS] }
{{- end}}
      { service: "$JS.API.STREAM.INFO.{{.Witness}}", accounts: [AUDIT, WITNESS] }
      { service: "$JS.API.CONSUMER.CREATE.{{.Witness}}.>", accounts: [AUDIT, WITNESS] }
      { service: "$JS.API.CONSUMER.MSG.NEXT.{{.Witness}}.*", accounts: [AUDIT, WITNESS], response: stream }
      { service: "$JS.API.CONSUMER.INFO.{{.Witness}}.*", accounts: [AUDIT, WITNESS] }
      { service: "$JS.API.CONSUMER.DELETE.{{.Witness}}.*", accounts: [AUDIT, WITNESS] }
      # The witness publishes the checkpoints it countersigned; the
      # stream's publish ack comes back to it across the boundary.
      { service: "{{.WitnessSubjects}}", accounts: [WITNESS] }
      { service: "$JS.API.DIRECT.GET.{{.FleetStream}}", accounts: [AUDIT], response: stream }
      { service: "$JS.API.DIRECT.GET.{{.FleetStream}}.>", accounts: [AUDIT] }
{{- range .Stores}}
      # {{.ID}}: its movements, reading back its own, its fleet summary
      # and reading that summary back.
      { service: "{{.Movements}}", accounts: [{{.ID}}] }
      { service: "{{.DirectGet}}", accounts: [{{.ID}}] }
      { service: "{{for $.Fleet .ID}}", accounts: [{{.ID}}] }
      { service: "{{.FleetGet}}", accounts: [{{.ID}}] }
{{- end}}
    ]
    imports: [
{{- range .Stores}}
      { service: { account: {{.ID}}, subject: "{{for $.Ctl .ID}}" } }
      { stream: { account: {{.ID}}, subject: "{{for $.Status .ID}}" } }
{{- end}}
    ]
  }
{{range .Stores}}
  # Store {{.ID}}: its agent is the only user of this account.
  {{.ID}} {
    users: [
      {
        user: {{.ID}}
        password: "CHANGE-ME-{{.ID}}"
        permissions: {
          publish: {
            allow: [
              # its movements, one subject per key
              "{{.LocalMovements}}"
              # read back one of its own stored movements for the digest
              # check (a plain request, no stream info)
              "{{.LocalDirectGet}}"
              # its heartbeat and its fleet summary
              "{{for $.Status .ID}}"
              "{{for $.Fleet .ID}}"
              # read back its own fleet summary: at start the agent asks
              # it for the highest sequence the store gave (a new or
              # restored data file continues after it)
              "{{.FleetGet}}"
            ]
          }
          subscribe: {
            allow: [
              # commands for this store
              "{{for $.Ctl .ID}}"
              # replies to its own requests
              "_INBOX_{{.ID}}.>"
            ]
          }
          # Lets the store answer a command it received, once.
          allow_responses: true
        }
      }
    ]
    imports: [
{{- if .Partitioned}}
      # its partition's subjects, under the names its agent uses
      { service: { account: RX, subject: "{{.Movements}}" }, to: "{{.LocalMovements}}" }
      { service: { account: RX, subject: "{{.DirectGet}}" }, to: "{{.LocalDirectGet}}" }
{{- else}}
      { service: { account: RX, subject: "{{.Movements}}" } }
      { service: { account: RX, subject: "{{.DirectGet}}" } }
{{- end}}
      { service: { account: RX, subject: "{{for $.Fleet .ID}}" } }
      { service: { account: RX, subject: "{{.FleetGet}}" } }
    ]
    exports: [
      { service: "{{for $.Ctl .ID}}", accounts: [RX] }
      { service: "{{for $.Reconcile .ID}}", accounts: [AUDIT] }
      { service: "{{for $.Ledger .ID}}", accounts: [AUDIT] }
      { stream: "{{for $.Status .ID}}", accounts: [RX] }
    ]
  }
{{end}}
  # Head office's reconciliation and verification: reads the archives (and
  # the witness's countersigned checkpoints, RX_WITNESS) with ordered consumers
  # (nats.go jetstream.OrderedConsumer: create, next, info and delete of
  # its own ephemeral consumers) and the fleet view, and sends stores the
  # signed read-only commands reconcile and ledger. It cannot publish movements,
  # delete, purge, or create or change a stream. An account of its own, so
  # that JetStream's answers to its requests come back into it: in RX, a
  # reply subject it named could have an answer stored as a movement. Its
  # JetStream API is central's under the prefix {{.AuditAPI}} (nats.go:
  # jetstream.NewWithAPIPrefix; nats CLI: --js-api-prefix), because the
  # server answers an account's own $JS.API itself.
  AUDIT {
    users: [
      {
        user: audit
        password: "CHANGE-ME-audit"
        permissions: {
          publish: {
            allow: [
{{- range .AuditArchives}}
              "{{$.AuditAPI}}STREAM.INFO.{{.Archive}}"
              "{{$.AuditAPI}}CONSUMER.CREATE.{{.Archive}}.>"
              "{{$.AuditAPI}}CONSUMER.MSG.NEXT.{{.Archive}}.*"
              "{{$.AuditAPI}}CONSUMER.INFO.{{.Archive}}.*"
              "{{$.AuditAPI}}CONSUMER.DELETE.{{.Archive}}.*"
{{- end}}
              "{{.AuditAPI}}STREAM.INFO.{{.Witness}}"
              "{{.AuditAPI}}CONSUMER.CREATE.{{.Witness}}.>"
              "{{.AuditAPI}}CONSUMER.MSG.NEXT.{{.Witness}}.*"
              "{{.AuditAPI}}CONSUMER.INFO.{{.Witness}}.*"
              "{{.AuditAPI}}CONSUMER.DELETE.{{.Witness}}.*"
              "{{.AuditAPI}}DIRECT.GET.{{.FleetStream}}"
              "{{.AuditAPI}}DIRECT.GET.{{.FleetStream}}.>"
              "{{.ReconcileAll}}"
              "{{.LedgerAll}}"
            ]
          }
          subscribe: { allow: ["_INBOX_audit.>"] }
        }
      }
    ]
    imports: [
{{- range .AuditArchives}}
      { service: { account: RX, subject: "$JS.API.STREAM.INFO.{{.Archive}}" }, to: "{{$.AuditAPI}}STREAM.INFO.{{.Archive}}" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.CREATE.{{.Archive}}.>" }, to: "{{$.AuditAPI}}CONSUMER.CREATE.{{.Archive}}.>" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.MSG.NEXT.{{.Archive}}.*" }, to: "{{$.AuditAPI}}CONSUMER.MSG.NEXT.{{.Archive}}.*" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.INFO.{{.Archive}}.*" }, to: "{{$.AuditAPI}}CONSUMER.INFO.{{.Archive}}.*" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.DELETE.{{.Archive}}.*" }, to: "{{$.AuditAPI}}CONSUMER.DELETE.{{.Archive}}.*" }
{{- end}}
      { service: { account: RX, subject: "$JS.API.STREAM.INFO.{{.Witness}}" }, to: "{{.AuditAPI}}STREAM.INFO.{{.Witness}}" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.CREATE.{{.Witness}}.>" }, to: "{{.AuditAPI}}CONSUMER.CREATE.{{.Witness}}.>" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.MSG.NEXT.{{.Witness}}.*" }, to: "{{.AuditAPI}}CONSUMER.MSG.NEXT.{{.Witness}}.*" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.INFO.{{.Witness}}.*" }, to: "{{.AuditAPI}}CONSUMER.INFO.{{.Witness}}.*" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.DELETE.{{.Witness}}.*" }, to: "{{.AuditAPI}}CONSUMER.DELETE.{{.Witness}}.*" }
      { service: { account: RX, subject: "$JS.API.DIRECT.GET.{{.FleetStream}}" }, to: "{{.AuditAPI}}DIRECT.GET.{{.FleetStream}}" }
      { service: { account: RX, subject: "$JS.API.DIRECT.GET.{{.FleetStream}}.>" }, to: "{{.AuditAPI}}DIRECT.GET.{{.FleetStream}}.>" }
{{- range .Stores}}
      { service: { account: {{.ID}}, subject: "{{for $.Reconcile .ID}}" } }
      { service: { account: {{.ID}}, subject: "{{for $.Ledger .ID}}" } }
{{- end}}
    ]
  }

  # Head office's witness (` + "`hq witness`" + `): reads the archives
  # and the witness stream {{.Witness}} (at start, its own countersignatures
  # after its state file's) with ordered consumers as the auditor does, and
  # publishes the checkpoints it countersigned to {{.WitnessSubjects}},
  # whose JetStream publish ack comes back to its inbox. It cannot publish movements, send commands, or
  # create, change, delete or purge a stream; no other user may publish to
  # {{.WitnessSubjects}}. An account of its own, not AUDIT's: an account
  # that can publish to {{.WitnessSubjects}} could have a JetStream answer
  # to a request of any of its users, whose reply subject that user
  # named, stored in {{.Witness}}, so the auditor would share the
  # witness's grant. Its JetStream API is central's under the prefix
  # {{.WitnessAPI}} (` + "`hq witness --js-api-prefix {{.WitnessAPI}}`" + `).
  WITNESS {
    users: [
      {
        user: witness
        password: "CHANGE-ME-witness"
        permissions: {
          publish: {
            allow: [
{{- range .AuditArchives}}
              "{{$.WitnessAPI}}STREAM.INFO.{{.Archive}}"
              "{{$.WitnessAPI}}CONSUMER.CREATE.{{.Archive}}.>"
              "{{$.WitnessAPI}}CONSUMER.MSG.NEXT.{{.Archive}}.*"
              "{{$.WitnessAPI}}CONSUMER.INFO.{{.Archive}}.*"
              "{{$.WitnessAPI}}CONSUMER.DELETE.{{.Archive}}.*"
{{- end}}
              "{{.WitnessAPI}}STREAM.INFO.{{.Witness}}"
              "{{.WitnessAPI}}CONSUMER.CREATE.{{.Witness}}.>"
              "{{.WitnessAPI}}CONSUMER.MSG.NEXT.{{.Witness}}.*"
              "{{.WitnessAPI}}CONSUMER.INFO.{{.Witness}}.*"
              "{{.WitnessAPI}}CONSUMER.DELETE.{{.Witness}}.*"
              "{{.WitnessSubjects}}"
            ]
          }
          subscribe: { allow: ["_INBOX_witness.>"] }
        }
      }
    ]
    imports: [
{{- range .AuditArchives}}
      { service: { account: RX, subject: "$JS.API.STREAM.INFO.{{.Archive}}" }, to: "{{$.WitnessAPI}}STREAM.INFO.{{.Archive}}" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.CREATE.{{.Archive}}.>" }, to: "{{$.WitnessAPI}}CONSUMER.CREATE.{{.Archive}}.>" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.MSG.NEXT.{{.Archive}}.*" }, to: "{{$.WitnessAPI}}CONSUMER.MSG.NEXT.{{.Archive}}.*" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.INFO.{{.Archive}}.*" }, to: "{{$.WitnessAPI}}CONSUMER.INFO.{{.Archive}}.*" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.DELETE.{{.Archive}}.*" }, to: "{{$.WitnessAPI}}CONSUMER.DELETE.{{.Archive}}.*" }
{{- end}}
      { service: { account: RX, subject: "$JS.API.STREAM.INFO.{{.Witness}}" }, to: "{{.WitnessAPI}}STREAM.INFO.{{.Witness}}" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.CREATE.{{.Witness}}.>" }, to: "{{.WitnessAPI}}CONSUMER.CREATE.{{.Witness}}.>" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.MSG.NEXT.{{.Witness}}.*" }, to: "{{.WitnessAPI}}CONSUMER.MSG.NEXT.{{.Witness}}.*" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.INFO.{{.Witness}}.*" }, to: "{{.WitnessAPI}}CONSUMER.INFO.{{.Witness}}.*" }
      { service: { account: RX, subject: "$JS.API.CONSUMER.DELETE.{{.Witness}}.*" }, to: "{{.WitnessAPI}}CONSUMER.DELETE.{{.Witness}}.*" }
      { service: { account: RX, subject: "{{.WitnessSubjects}}" } }
    ]
  }

  # The server's own account, for monitoring (` + "`nats server report`" + `).
  SYS {
    users: [
      { user: sys, password: "CHANGE-ME-sys" }
    ]
  }
}
system_account: SYS

# NKeys instead of passwords: generate a user key pair with
# ` + "`nk -gen user -pubout`" + ` (or nkeys.CreateUser in Go), give the store the
# seed (SU…, keep it secret), and replace ` + "`user`" + ` and ` + "`password`" + ` in its entry
# by the public key, keeping the permissions:
#
#   { nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4
#     permissions: { … as for S0001 … } }
#
# For .creds files (JWTs), run the server in operator mode with ` + "`nsc`" + `: one
# account per store with the same imports and exports, and the same
# publish and subscribe lists in each user's JWT.
`))
