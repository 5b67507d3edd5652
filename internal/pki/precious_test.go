package pki

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/khw-dev/khw/internal/config"
)

// verifyAll checks that every leaf of the default cluster chains to dir's
// ca.pem (name and signature, as a TLS peer would) at now.
func verifyAll(t *testing.T, dir string, now time.Time) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, dir, "ca"))
	for _, n := range leafNames {
		if _, err := readCert(t, dir, n).Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s does not chain to ca.pem: %v", n, err)
		}
	}
}

// serials returns the serial of every cert of the default cluster.
func serials(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range allNames {
		out[n] = formatSerial(readCert(t, dir, n).SerialNumber)
	}
	return out
}

// A damaged ca.pem next to an intact ca-key.pem is re-signed from that key
// with the same subject: every leaf still verifies and is kept.
func TestCACertDamagedIsResignedFromItsKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		code   ReasonCode
		detail string
	}{
		{"missing", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "ca.pem")) }, ReasonMissing, "ca.pem does not exist"},
		{"garbage", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "ca.pem"), "not a cert\n") }, ReasonUnreadable, "ca.pem holds no PEM block"},
		{"empty", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "ca.pem"), "") }, ReasonUnreadable, "ca.pem is empty"},
		{"a key instead", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "ca.pem"), string(readFile(t, filepath.Join(dir, "admin-key.pem"))))
		}, ReasonUnreadable, "ca.pem holds a private key (EC PRIVATE KEY), not a certificate"},
		{"another CA's cert", func(t *testing.T, dir string) {
			cert, _ := otherCA(t)
			writeFile(t, filepath.Join(dir, "ca.pem"), string(cert))
		}, ReasonKeyMismatch, "ca.pem is not the cert of ca-key.pem"},
		{"a leaf cert", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "ca.pem"), string(readFile(t, filepath.Join(dir, "admin.pem"))))
		}, ReasonKeyMismatch, "ca.pem is not the cert of ca-key.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(t)
			dir := t.TempDir()
			now := time.Now().Truncate(time.Second)
			reconcile(t, c, dir, now)
			oldKey := readFile(t, filepath.Join(dir, "ca-key.pem"))
			oldCA := readCert(t, dir, "ca")
			before := serials(t, dir)
			tc.damage(t, dir)

			r := reconcile(t, c, dir, now)
			s := status(t, r, "ca")
			if s.Action != Resigned || !slices.Equal(codes(s.Reasons), []ReasonCode{tc.code}) ||
				!strings.HasPrefix(s.Reasons[0].Detail, tc.detail) || !strings.Contains(s.Reasons[0].Detail, "re-signed from the same key") {
				t.Errorf("ca: %s %v, want re-signed (%s: %s…)", s.Action, s.Reasons, tc.code, tc.detail)
			}
			if strings.Contains(s.Reasons[0].Detail, `{"code"`) {
				t.Errorf("raw cfssl error in %q", s.Reasons[0].Detail)
			}
			if !bytes.Equal(oldKey, readFile(t, filepath.Join(dir, "ca-key.pem"))) {
				t.Fatal("ca-key.pem was replaced")
			}
			ca := readCert(t, dir, "ca")
			if !bytes.Equal(ca.RawSubject, oldCA.RawSubject) || !ca.IsCA {
				t.Errorf("re-signed CA subject %s, want %s", ca.Subject, oldCA.Subject)
			}
			for _, n := range leafNames {
				if st := status(t, r, n); st.Action != Kept || st.Serial != before[n] {
					t.Errorf("%s: %s %v (serial %s, was %s), want kept", n, st.Action, st.Reasons, st.Serial, before[n])
				}
			}
			verifyAll(t, dir, now)
			if again := reconcile(t, c, dir, now); again.Changed() {
				t.Errorf("second run after the re-sign wrote %v", again.Written)
			}
		})
	}
}

// ca-key.pem missing or unreadable while ca.pem or certs exist: refused with
// a *PreciousKeyError naming the file and the fix, nothing written, in a
// dry run too.
func TestCAKeyLostIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, dir string)
		problem string
	}{
		{"key deleted", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "ca-key.pem")) },
			"does not exist, but ca.pem and 8 cert(s) it may have signed"},
		{"key garbage", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "ca-key.pem"), "oops\n") },
			"holds no PEM block"},
		{"key is a cert", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "ca-key.pem"), string(readFile(t, filepath.Join(dir, "ca.pem"))))
		}, "holds a certificate, not a private key"},
		{"key and ca.pem deleted, leaves remain", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "ca-key.pem"))
			os.Remove(filepath.Join(dir, "ca.pem"))
		}, "does not exist, but 8 cert(s) it may have signed (admin.pem, kube-controller-manager.pem"},
		{"only one leaf remains", func(t *testing.T, dir string) {
			for _, n := range allNames {
				if n != "kube-proxy" {
					os.Remove(filepath.Join(dir, n+".pem"))
					os.Remove(filepath.Join(dir, n+"-key.pem"))
				}
			}
		}, "does not exist, but 1 cert(s) it may have signed (kube-proxy.pem)"},
		{"another CA's key, ca.pem intact", func(t *testing.T, dir string) {
			_, key := otherCA(t)
			writeFile(t, filepath.Join(dir, "ca-key.pem"), string(key))
		}, "signed none of the certs in"},
		{"another CA's key, ca.pem deleted", func(t *testing.T, dir string) {
			_, key := otherCA(t)
			writeFile(t, filepath.Join(dir, "ca-key.pem"), string(key))
			os.Remove(filepath.Join(dir, "ca.pem"))
		}, "signed none of the certs in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultCluster(t)
			dir := t.TempDir()
			now := time.Now().Truncate(time.Second)
			reconcile(t, c, dir, now)
			tc.damage(t, dir)
			if err := os.Chmod(filepath.Join(dir, "ca-config.json"), 0o600); err != nil {
				t.Fatal(err) // a mode to fix, which must not be fixed either
			}
			before := snapshot(t, dir)
			for _, opts := range [][]Option{nil, {DryRun()}, {AllowNewServiceAccountKey()}} {
				rep, err := Reconcile(c, dir, now, opts...)
				var pk *PreciousKeyError
				if !errors.As(err, &pk) || rep != nil {
					t.Fatalf("report %v, err %v; want a *PreciousKeyError and no report", rep, err)
				}
				if pk.File != filepath.Join(dir, "ca-key.pem") || !strings.Contains(pk.Problem, tc.problem) || pk.Option != "AllowNewCA" {
					t.Errorf("error %+v, want File %s, Problem with %q, Option AllowNewCA", pk, filepath.Join(dir, "ca-key.pem"), tc.problem)
				}
				for _, w := range []string{"restore ", "from a backup", "`khw pki --new-ca`", "reissues every cert", "breaks every kubeconfig and node"} {
					if !strings.Contains(pk.Fix, w) {
						t.Errorf("fix %q lacks %q", pk.Fix, w)
					}
				}
				if strings.Contains(err.Error(), `{"code"`) || strings.Contains(err.Error(), "PRIVATE KEY-----") {
					t.Errorf("error shows cfssl JSON or key material: %v", err)
				}
				assertUnchanged(t, dir, before)
			}

			// Asked for: a new CA, and every cert chains to it.
			r := reconcile(t, c, dir, now, AllowNewCA())
			if s := status(t, r, "ca"); s.Action != Reissued && s.Action != Created && s.Action != Resigned {
				t.Errorf("ca with AllowNewCA: %s %v", s.Action, s.Reasons)
			}
			for _, n := range leafNames {
				if s := status(t, r, n); s.Action == Kept {
					t.Errorf("%s kept though the CA key changed", n)
				}
			}
			checkCerts(t, c, dir, now, now)
		})
	}
}

// A directory with no CA and no certs is fresh: the CA is made without
// asking, even if other files (ca-config.json, CSR JSON) are there.
func TestFreshDirMakesCAWithoutAsking(t *testing.T) {
	c := defaultCluster(t)
	dir := t.TempDir()
	now := time.Now().Truncate(time.Second)
	reconcile(t, c, dir, now)
	for _, n := range allNames {
		os.Remove(filepath.Join(dir, n+".pem"))
		os.Remove(filepath.Join(dir, n+"-key.pem"))
	}
	r := reconcile(t, c, dir, now)
	for _, n := range allNames {
		if s := status(t, r, n); s.Action != Created {
			t.Errorf("%s: %s %v, want created", n, s.Action, s.Reasons)
		}
	}
	checkCerts(t, c, dir, now, now)
}

func TestServiceAccountKeyIsPrecious(t *testing.T) {
	c := defaultCluster(t)
	now := time.Now().Truncate(time.Second)
	saKeyPath := func(dir string) string { return filepath.Join(dir, "service-account-key.pem") }

	t.Run("key lost", func(t *testing.T) {
		for name, damage := range map[string]func(dir string){
			"deleted": func(dir string) { os.Remove(saKeyPath(dir)) },
			"garbage": func(dir string) {
				writeFile(t, saKeyPath(dir), "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
			},
		} {
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				reconcile(t, c, dir, now)
				damage(dir)
				before := snapshot(t, dir)
				rep, err := Reconcile(c, dir, now, AllowNewCA()) // AllowNewCA does not cover this key
				var pk *PreciousKeyError
				if !errors.As(err, &pk) || rep != nil || pk.File != saKeyPath(dir) || pk.Option != "AllowNewServiceAccountKey" ||
					!strings.Contains(pk.Problem, "but service-account.pem does") || !strings.Contains(pk.Fix, "--new-service-account-key") ||
					!strings.Contains(pk.Fix, "invalidates every ServiceAccount token") {
					t.Fatalf("report %v, err %#v; want a *PreciousKeyError for %s", rep, err, saKeyPath(dir))
				}
				if strings.Contains(err.Error(), `{"code"`) {
					t.Errorf("raw cfssl error: %v", err)
				}
				assertUnchanged(t, dir, before)

				r := reconcile(t, c, dir, now, AllowNewServiceAccountKey())
				assertOnly(t, r, Reissued, map[string]ReasonCode{"deleted": ReasonMissing, "garbage": ReasonUnreadable}[name], "service-account")
				checkCerts(t, c, dir, now, now)
			})
		}
	})

	t.Run("cert damaged, key intact", func(t *testing.T) {
		for name, damage := range map[string]func(dir string){
			"deleted": func(dir string) { os.Remove(filepath.Join(dir, "service-account.pem")) },
			"another cert": func(dir string) {
				copyFile(t, filepath.Join(dir, "admin.pem"), filepath.Join(dir, "service-account.pem"))
			},
			"wrong subject": func(dir string) {
				cert, _ := handIssue(t, dir, "service-accounts", "Kubernetes", nil, "signing", now.Add(-time.Minute), now.Add(time.Hour))
				writeFile(t, filepath.Join(dir, "service-account.pem"), string(cert))
			},
		} {
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				reconcile(t, c, dir, now)
				key := readFile(t, saKeyPath(dir))
				damage(dir)
				r := reconcile(t, c, dir, now)
				if s := status(t, r, "service-account"); s.Action != Resigned || !strings.Contains(s.Reasons[0].Detail, "re-signed for the same key") {
					t.Errorf("service-account: %s %v, want re-signed", s.Action, s.Reasons)
				}
				if !bytes.Equal(key, readFile(t, saKeyPath(dir))) {
					t.Error("service-account-key.pem was replaced")
				}
				checkCerts(t, c, dir, now, now) // the cert is the key's again
			})
		}
	})

	t.Run("both gone is fresh", func(t *testing.T) {
		dir := t.TempDir()
		reconcile(t, c, dir, now)
		os.Remove(saKeyPath(dir))
		os.Remove(filepath.Join(dir, "service-account.pem"))
		r := reconcile(t, c, dir, now)
		assertOnly(t, r, Created, ReasonMissing, "service-account")
	})
}

// A kubeletCert import that cannot be used stops the run before anything is
// written: not the CA, not the other certs, not the directory.
func TestBadImportWritesNothing(t *testing.T) {
	now := time.Now().Truncate(time.Second)

	t.Run("fresh dir", func(t *testing.T) {
		otherDir := t.TempDir()
		oc, ok := otherCA(t)
		writePair(t, otherDir, "ca", oc, ok)
		for _, tc := range []struct {
			name, field, problem string
			cert, key            []byte
		}{
			{"not PEM", "nodes[4] (w1).kubeletCert.cert", "is not one PEM certificate: it holds no PEM block", []byte("hello\n"), ok},
			{"signed by another CA", "nodes[4] (w1).kubeletCert.cert", "is not signed by the cluster CA", oc, ok},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := defaultCluster(t)
				setKubeletCert(t, c, "w1", tc.cert, tc.key)
				dir := filepath.Join(t.TempDir(), "pki")
				rep, err := Reconcile(c, dir, now)
				assertFieldError(t, err, tc.field, tc.problem)
				if rep != nil {
					t.Errorf("report %v for a run that did nothing", rep)
				}
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s was created although an import was bad", dir)
				}
			})
		}
	})

	for _, tc := range []struct {
		name, field, problem string
		hosts                []string
		profile              string
	}{
		{"wrong SANs", "nodes[4] (w1).kubeletCert.cert", "lacks the SANs 192.168.122.21", []string{"w1"}, "kubernetes"},
		{"client profile", "nodes[4] (w1).kubeletCert.cert", "has no server auth EKU", []string{"w1", "192.168.122.21"}, "client"},
	} {
		t.Run("existing dir, "+tc.name, func(t *testing.T) {
			c := defaultCluster(t)
			dir := t.TempDir()
			reconcile(t, c, dir, now)
			cert, key := handIssue(t, dir, "system:node:w1", "system:nodes", tc.hosts, tc.profile, now.Add(-time.Minute), now.Add(time.Hour))
			setKubeletCert(t, c, "w1", cert, key)
			// Changes that would rewrite files: a new SAN for kubernetes, a
			// deleted cert, a key with the wrong mode.
			c.Network.Domain = "lab.example"
			os.Remove(filepath.Join(dir, "admin.pem"))
			os.Chmod(filepath.Join(dir, "kube-proxy-key.pem"), 0o644)
			before := snapshot(t, dir)
			rep, err := Reconcile(c, dir, now)
			assertFieldError(t, err, tc.field, tc.problem)
			if rep != nil {
				t.Errorf("report %v", rep)
			}
			assertUnchanged(t, dir, before)
		})
	}
}

func assertFieldError(t *testing.T, err error, field, problem string) {
	t.Helper()
	var fe *config.FieldError
	for _, e := range unjoin(err) {
		if errors.As(e, &fe) && fe.Field == field && strings.Contains(fe.Problem, problem) {
			if strings.Contains(fe.Error(), `{"code"`) {
				t.Errorf("raw cfssl error: %v", fe)
			}
			return
		}
	}
	t.Fatalf("err = %v, want a FieldError on %s with %q", err, field, problem)
}

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t testing.TB, from, to string) { t.Helper(); writeFile(t, to, string(readFile(t, from))) }
