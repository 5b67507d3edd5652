package pki

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A lost CA key is refused (PreciousKeyError, nothing written) unless
// AllowNewCA; with it, a new CA is made and every cert reissued, except that
// the service-account cert is re-signed for its own (precious) key.
func TestCARegeneratedReissuesEverything(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	oldCA := readCert(t, dir, "ca")
	saKey := readFile(t, filepath.Join(dir, "service-account-key.pem"))
	if err := os.Remove(filepath.Join(dir, "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	rep, err := Reconcile(c, dir, now)
	var pk *PreciousKeyError
	if !errors.As(err, &pk) || rep != nil {
		t.Fatalf("without AllowNewCA: report %v, err %v; want a *PreciousKeyError and no report", rep, err)
	}
	assertUnchanged(t, dir, before)

	r := reconcile(t, c, dir, now, AllowNewCA())
	if s := status(t, r, "ca"); s.Action != Reissued || !strings.HasPrefix(s.Reasons[0].Detail, "ca-key.pem does not exist; a new CA key was made") {
		t.Errorf("ca: %s %v", s.Action, s.Reasons)
	}
	for _, n := range leafNames {
		want := Reissued
		if n == "service-account" {
			want = Resigned
		}
		s := status(t, r, n)
		if s.Action != want || !slices.Equal(codes(s.Reasons), []ReasonCode{ReasonNotSignedBy}) {
			t.Errorf("%s: %s %v, want %s (not-signed-by-ca only)", n, s.Action, s.Reasons, want)
		} else if !strings.Contains(s.Reasons[0].Detail, "a new CA (new ca-key.pem) was made in this run") {
			t.Errorf("%s: detail %q does not say the CA key was replaced", n, s.Reasons[0].Detail)
		}
	}
	if readCert(t, dir, "ca").Equal(oldCA) {
		t.Error("CA not regenerated")
	}
	if !bytes.Equal(saKey, readFile(t, filepath.Join(dir, "service-account-key.pem"))) {
		t.Error("a new CA replaced the service-account key")
	}
	checkCerts(t, c, dir, now, now) // every cert chains to the new CA
}

func TestCARenewedWithSameKey(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	oldKey := readFile(t, filepath.Join(dir, "ca-key.pem"))
	oldCA := readCert(t, dir, "ca")
	oldAdmin := readCert(t, dir, "admin")

	later := now.Add(c.PKI.CAValidity - c.PKI.RenewBefore + time.Hour)
	r := reconcile(t, c, dir, later)
	if s := status(t, r, "ca"); s.Action != Resigned || !slices.Equal(codes(s.Reasons), []ReasonCode{ReasonRenew}) {
		t.Errorf("ca: %s %v, want re-signed (renew)", s.Action, s.Reasons)
	}
	if !bytes.Equal(oldKey, readFile(t, filepath.Join(dir, "ca-key.pem"))) {
		t.Error("CA key changed on renewal")
	}
	newCA := readCert(t, dir, "ca")
	if newCA.SerialNumber.Cmp(oldCA.SerialNumber) == 0 || !newCA.NotAfter.After(oldCA.NotAfter) {
		t.Error("CA cert not renewed")
	}
	if err := oldAdmin.CheckSignatureFrom(newCA); err != nil {
		t.Errorf("a cert signed by the old CA cert does not verify with the renewed one: %v", err)
	}
	// The leaves are 9 years past their expiry: reissued for that, not for the CA.
	for _, n := range leafNames {
		if got := codes(status(t, r, n).Reasons); !slices.Equal(got, []ReasonCode{ReasonExpired}) {
			t.Errorf("%s reasons = %v, want only expired", n, got)
		}
	}
}

// An expired CA is re-signed from its own key (the key is precious): the
// leaves, long expired too, are reissued for that alone, and chain to it.
func TestExpiredCAIsResignedFromItsKey(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	oldKey := readFile(t, filepath.Join(dir, "ca-key.pem"))
	oldCA := readCert(t, dir, "ca")
	later := now.Add(c.PKI.CAValidity + time.Hour)
	r := reconcile(t, c, dir, later)
	if s := status(t, r, "ca"); s.Action != Resigned || !slices.Equal(codes(s.Reasons), []ReasonCode{ReasonExpired}) {
		t.Errorf("ca: %s %v, want re-signed (expired)", s.Action, s.Reasons)
	}
	if !bytes.Equal(oldKey, readFile(t, filepath.Join(dir, "ca-key.pem"))) {
		t.Error("an expired CA got a new key; it must be re-signed from the old one")
	}
	if ca := readCert(t, dir, "ca"); !bytes.Equal(ca.RawSubject, oldCA.RawSubject) || !ca.NotAfter.After(later) {
		t.Errorf("re-signed CA: subject %s (was %s), NotAfter %s", ca.Subject, oldCA.Subject, ca.NotAfter)
	}
	for _, n := range leafNames {
		if got := codes(status(t, r, n).Reasons); !slices.Equal(got, []ReasonCode{ReasonExpired}) {
			t.Errorf("%s reasons = %v, want only expired", n, got)
		}
	}
	checkCerts(t, c, dir, later, later)
}
