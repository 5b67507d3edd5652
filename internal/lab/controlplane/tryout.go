package controlplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labcheck"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// storedSecret tries what lab 05 exists to make work: every apiserver
// stores into the one etcd cluster and encrypts at rest with the same
// keys, so a Secret written through one apiserver is read back, the same,
// through every other (https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/:
// "each kube-apiserver must be configured with the same encryption
// configuration"). It writes one Secret through each apiserver and reads
// each through all of them. A failure names the apiserver and the likely
// cause read from the nodes: encryption configs that differ, or the
// apiserver not answering.
func storedSecret(e *labcheck.Env) ([]labcheck.Mistake, error) {
	if e.Live == nil || e.Live.Admin == nil {
		return nil, nil
	}
	const lab = labid.ControlPlane
	// Each request gets its own time: an apiserver that does not answer
	// must not use up the others'.
	reqTimeout := e.Live.Target.Scaled(5*time.Second, 20*time.Second)
	cps := e.Cluster.ControlPlanes()
	clients := map[string]kubernetes.Interface{}
	for _, n := range cps {
		cs, err := e.Live.APIServer(n)
		if err != nil {
			return nil, err
		}
		clients[n.Name] = cs
	}
	b := make([]byte, 4)
	rand.Read(b)
	run := hex.EncodeToString(b)
	type stored struct {
		by    config.Node
		name  string
		value []byte
	}
	var written []stored
	var out []labcheck.Mistake
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		for _, s := range written {
			for _, n := range cps {
				if clients[n.Name].CoreV1().Secrets(labcheck.TryoutNamespace).Delete(dctx, s.name, metav1.DeleteOptions{}) == nil {
					break
				}
			}
		}
	}()
	for _, n := range cps {
		s := stored{by: n, name: "khw-lab-check-" + run + "-" + n.Name, value: []byte("stored through " + n.Name + " at " + e.Now.UTC().Format(time.RFC3339))}
		ctx, cancel := context.WithTimeout(e.Ctx, reqTimeout)
		_, err := clients[n.Name].CoreV1().Secrets(labcheck.TryoutNamespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: map[string]string{labcheck.TryoutLabel: "true"}},
			Data:       map[string][]byte{"value": s.value},
		}, metav1.CreateOptions{})
		cancel()
		if err != nil {
			out = append(out, labcheck.Mistake{Lab: lab, Node: n.Name, Kind: grade.Breaks, Subject: "store through " + n.Name,
				What:     "a Secret cannot be stored through the apiserver on " + n.Name + ": " + labcheck.OneLine(err),
				Evidence: "POST /api/v1/namespaces/" + labcheck.TryoutNamespace + "/secrets at https://" + n.IP + " as admin",
				Fix:      "on " + n.Name + ": systemctl status kube-apiserver and journalctl -u kube-apiserver (its /readyz?verbose names the failing check); khw lab check 04 if etcd is the cause"})
			continue
		}
		written = append(written, s)
	}
	for _, s := range written {
		for _, r := range cps {
			if r.Name == s.by.Name {
				continue
			}
			ctx, cancel := context.WithTimeout(e.Ctx, reqTimeout)
			got, err := clients[r.Name].CoreV1().Secrets(labcheck.TryoutNamespace).Get(ctx, s.name, metav1.GetOptions{})
			cancel()
			if err == nil && bytes.Equal(got.Data["value"], s.value) {
				continue
			}
			what := fmt.Sprintf("a Secret stored through %s's apiserver cannot be read back through %s's", s.by.Name, r.Name)
			if err != nil {
				what += ": " + labcheck.OneLine(err)
			} else {
				what += ": it reads other data"
			}
			ev, fix := readCause(e, s.by, r)
			out = append(out, labcheck.Mistake{Lab: lab, Node: r.Name, Kind: grade.Inconsistent, Subject: "read through " + r.Name,
				What: what + "; clients behind the load balancer see Secrets come and go", Evidence: ev, Fix: fix})
		}
	}
	return out, nil
}

// readCause compares what writer's and reader's apiservers encrypt with:
// different encryption configs are the likely cause of a Secret that one
// stores and the other cannot read.
func readCause(e *labcheck.Env, writer, reader config.Node) (evidence, fix string) {
	wsum, wpath := encryptionConfigSum(e, writer)
	rsum, rpath := encryptionConfigSum(e, reader)
	if wsum != "" && rsum != "" && wsum != rsum {
		return fmt.Sprintf("%s:%s (sha256 %s) and %s:%s (sha256 %s) differ", writer.Name, wpath, wsum[:12], reader.Name, rpath, rsum[:12]),
			fmt.Sprintf("copy the same encryption config to every control plane (the one in the state directory: encryption-config.yaml), restart kube-apiserver on each, then rewrite the Secrets: kubectl get secrets -A -o json | kubectl replace -f -")
	}
	return fmt.Sprintf("the encryption configs of %s and %s are the same; the read through %s failed", writer.Name, reader.Name, reader.Name),
		"on " + reader.Name + ": journalctl -u kube-apiserver; both apiservers must use the same etcd (--etcd-servers) — khw lab check 04 tries etcd itself"
}

// encryptionConfigSum is the sha256 of the file n's apiserver is started
// with as --encryption-provider-config, and its path ("" when it cannot be
// read).
func encryptionConfigSum(e *labcheck.Env, n config.Node) (sum, path string) {
	u, ms, err := apiserverUnit(e, n.Name)
	if err != nil || len(ms) > 0 {
		return "", ""
	}
	p, ok := u.Flag("encryption-provider-config")
	if !ok {
		return "", "(none)"
	}
	data, found, err := e.Read(n.Name, p)
	if err != nil || !found {
		return "", p
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:]), p
}
