package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
)

// Check names of the store's signing key (DESIGN P9), reported after the
// local checks.
const (
	CheckLedgerKey        = "signing key"
	CheckLedgerKeyPrivate = "signing key private"
	CheckLedgerKeyMatches = "signing key of newest checkpoint"
)

// ledgerKeyChecks check the store's signing key: the key file is there
// (or will be made at the first start of a new data file), it is a key
// named for this store, only the service's account may read it, and it
// is the key that signed the newest checkpoint (else the roster needs
// it). st is the agent's status (nil with stErr when it could not be
// read). Only the public key is ever shown.
func ledgerKeyChecks(o Options, st *status.Status, stErr error) []Check {
	c := o.Config
	if c.StoreID == "" || c.DataDir == "" {
		detail := "no store_id or data_dir in the configuration"
		return []Check{
			{Name: CheckLedgerKey, Skipped: true, Detail: detail, Fix: "see the config check"},
			{Name: CheckLedgerKeyPrivate, Skipped: true, Detail: detail, Fix: "see the config check"},
			{Name: CheckLedgerKeyMatches, Skipped: true, Detail: detail, Fix: "see the config check"},
		}
	}
	dataDir, err := filepath.Abs(c.DataDir)
	if err != nil {
		dataDir = c.DataDir
	}
	ls, problems := c.Ledger.Validate("ledger", dataDir)
	if len(problems) > 0 {
		return []Check{{Name: CheckLedgerKey, Detail: problems[0], Fix: "edit " + o.ConfigPath + ": " + problems[0]}}
	}
	path, store := ls.KeyFile, c.StoreID
	signedBy := ""
	if st != nil && st.Ledger != nil {
		signedBy = st.Ledger.LastCheckpointKey
	}
	_, statErr := os.Stat(settings.DataFile(dataDir))
	newFile := errors.Is(statErr, fs.ErrNotExist) || st != nil && st.Ledger != nil && st.Ledger.Signed == 0 && st.Ledger.LastCheckpointAt == nil
	rotate := fmt.Sprintf("`%s ledger rotate-key --config %s`", o.Command, o.ConfigPath)
	if o.ConfigPath == "" {
		rotate = fmt.Sprintf("`%s ledger rotate-key`", o.Command)
	}

	var out []Check
	k, err := notary.LoadKey(path, store)
	switch {
	case err == nil:
		out = append(out, Check{Name: CheckLedgerKey, OK: true, Detail: fmt.Sprintf("%s: store %s's key, public key %s", path, store, k.VKey)})
	case errors.Is(err, notary.ErrNoKey) && newFile:
		out = append(out, Check{Name: CheckLedgerKey, OK: true,
			Detail: fmt.Sprintf("%s not made yet: the agent makes it at its first start (the data file is new); then add \"%s <public key>\" from `%s status` to the roster", path, store, o.Command)})
	case errors.Is(err, notary.ErrNoKey):
		d := fmt.Sprintf("%s is missing, and the data file holds checkpoints the store signed", path)
		if signedBy != "" {
			d += " with " + signedBy
		}
		out = append(out, Check{Name: CheckLedgerKey, Detail: d + ": the key is lost (the agent would make a new one at its next start)",
			Fix: fmt.Sprintf("restore %s from this PC's backup; if there is none, run %s and add the line it prints to the roster", path, rotate)})
	case errors.Is(err, fs.ErrPermission):
		out = append(out, Check{Name: CheckLedgerKey, Detail: fmt.Sprintf("%s: permission denied", path),
			Fix: "run doctor as an administrator (sudo)"})
	default:
		out = append(out, Check{Name: CheckLedgerKey, Detail: err.Error(),
			Fix: fmt.Sprintf("move %s away (keep it for whoever investigates), then restore the store's key from a backup or run %s and add the line it prints to the roster", path, rotate)})
	}

	out = append(out, keyPrivate(path, dataDir))

	switch {
	case k == nil && errors.Is(err, notary.ErrNoKey) && newFile:
		out = append(out, Check{Name: CheckLedgerKeyMatches, OK: true, Detail: "nothing signed yet: the first checkpoint is signed with the key the agent makes"})
	case k == nil:
		out = append(out, Check{Name: CheckLedgerKeyMatches, Skipped: true, Detail: "no key to compare (see the signing key check)", Fix: "fix the signing key first"})
	case st == nil:
		out = append(out, Check{Name: CheckLedgerKeyMatches, Skipped: true, Detail: fmt.Sprintf("the status cannot be read: %v", stErr),
			Fix: fmt.Sprintf("start the agent (`%s start`) and run doctor again as an administrator", o.Command)})
	case signedBy == "":
		out = append(out, Check{Name: CheckLedgerKeyMatches, OK: true, Detail: "no checkpoint signed yet: the first is signed with this key"})
	case ledger.KeyID(k.VKey) == signedBy:
		out = append(out, Check{Name: CheckLedgerKeyMatches, OK: true, Detail: fmt.Sprintf("the newest checkpoint (size %d) was signed with this key", st.Ledger.Signed)})
	default:
		out = append(out, Check{Name: CheckLedgerKeyMatches, Warning: true,
			Detail: fmt.Sprintf("the newest checkpoint was signed with %s, not with the key file's %s: the key was rotated, replaced or lost since, and what the store signs from now on verifies only with the new key", signedBy, ledger.KeyID(k.VKey)),
			Fix:    fmt.Sprintf("the roster needs the new key: add the line \"%s %s\" (keep the old key's line while its checkpoints are verified)", store, k.VKey)})
	}
	return out
}

// keyPrivate checks that the service's account may read the key file at
// path and nobody else but the administrators: on Linux owned by that
// account with mode 0600; on Windows a DACL that grants no group of every
// local user.
func keyPrivate(path, dataDir string) Check {
	c := Check{Name: CheckLedgerKeyPrivate}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.OK, c.Detail = true, "no key file yet: the agent makes it readable by its own account only"
		return c
	case err != nil:
		c.Detail, c.Fix = err.Error(), "run doctor as an administrator (sudo)"
		return c
	case !fi.Mode().IsRegular():
		c.Skipped, c.Detail, c.Fix = true, path+" is not a regular file (see the signing key check)", "fix the signing key first"
		return c
	}
	account, reads, err := installer.ServiceCanRead(path, dataDir)
	if err != nil {
		c.Detail, c.Fix = fmt.Sprintf("the permissions of %s cannot be read: %v", path, err), "run doctor as an administrator (sudo)"
		return c
	}
	if runtime.GOOS == "windows" {
		if open := installer.ReadableByOthers(path); len(open) > 0 {
			c.Detail, c.Fix = path+" is readable by every local user", installer.PrivateFix(path)
			return c
		}
		if !reads {
			c.Detail = fmt.Sprintf("the service's account %s may not read %s: the agent cannot sign", account, path)
			c.Fix = fmt.Sprintf(`icacls "%s" /grant "%s:R"`, path, account)
			return c
		}
		c.OK, c.Detail = true, fmt.Sprintf("readable by %s, SYSTEM and the Administrators only", account)
		return c
	}
	mode := fi.Mode().Perm()
	if mode&0o077 != 0 {
		c.Detail = fmt.Sprintf("%s has mode %04o: users other than its owner may read or change the private key", path, mode)
		c.Fix = "chmod 600 " + path
		if !reads {
			c.Fix = fmt.Sprintf("chown %s %s && chmod 600 %s", account, path, path)
		}
		return c
	}
	if !reads {
		c.Detail = fmt.Sprintf("the service's account %s (the data directory's owner) may not read %s: the agent cannot sign", account, path)
		c.Fix = fmt.Sprintf("chown %s %s && chmod 600 %s", account, path, path)
		return c
	}
	c.OK, c.Detail = true, fmt.Sprintf("readable by %s only (mode %04o)", account, mode)
	return c
}
