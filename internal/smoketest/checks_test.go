package smoketest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestEncryptionEvidence(t *testing.T) {
	key := SecretEtcdKey("khw-smoke", SecretName)
	iv := []byte{0xde, 0xad, 0xbe, 0xef}
	for _, tc := range []struct {
		name    string
		raw     []byte
		wantEv  string
		wantErr string
	}{
		{"aescbc key1", append([]byte(testPrefix), iv...), `etcd /registry/secrets/khw-smoke/kubernetes-the-hard-way = "k8s:enc:aescbc:v1:key1:" + de ad be ef (27 bytes, no plaintext "mydata")`, ""},
		{"another key", append([]byte("k8s:enc:aescbc:v1:key2:"), iv...), "", `starts "k8s:enc:aescbc:v1:key2:", want "k8s:enc:aescbc:v1:key1:"`},
		{"secretbox", append([]byte("k8s:enc:secretbox:v1:key1:"), iv...), "", `starts "k8s:enc:secretbox:v1:key1:"`},
		{"identity (protobuf)", []byte("k8s\x00\n\x0c\n\x02v1\x12\x06Secret"), "", "it is not encrypted"},
		{"plaintext", []byte("k8s\x00 ... mydata"), "", `holds the plaintext "mydata"`},
		{"no key", nil, "", "etcd has no key /registry/secrets/khw-smoke/kubernetes-the-hard-way"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := encryptionEvidence(tc.raw, testPrefix, key)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || ev != tc.wantEv {
				t.Fatalf("evidence %q, %v; want %q", ev, err, tc.wantEv)
			}
		})
	}
}

func TestKubeletServingCert(t *testing.T) {
	ca := newTestCA(t, "khw-ca")
	pair, _, _ := ca.issue(t, "system:node:w3", []string{"w3"}, []string{"192.168.122.23"}, x509.ExtKeyUsageServerAuth)
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	d := &mapDialer{to: map[string]string{"192.168.122.23:10250": srv.Listener.Addr().String(), "192.168.122.22:10250": srv.Listener.Addr().String()}}
	ctx := context.Background()

	cert, err := kubeletServingCert(ctx, d.dial, "192.168.122.23", KubeletPort, ca.pool())
	if err != nil || cert.Subject.CommonName != "system:node:w3" {
		t.Fatalf("cert %v, err %v", cert, err)
	}
	if s := certSummary(cert); !strings.Contains(s, "CN=system:node:w3") || !strings.Contains(s, "SANs w3 192.168.122.23") || !strings.Contains(s, "issued by CN=khw-ca") {
		t.Errorf("summary %q", s)
	}
	other := newTestCA(t, "other")
	if _, err := kubeletServingCert(ctx, d.dial, "192.168.122.23", KubeletPort, other.pool()); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("another CA: %v, want unknown authority", err)
	}
	// The certificate of w3 served at w2's address does not name it.
	if _, err := kubeletServingCert(ctx, d.dial, "192.168.122.22", KubeletPort, ca.pool()); err == nil || !strings.Contains(err.Error(), "192.168.122.22") {
		t.Errorf("wrong IP: %v, want a name mismatch for 192.168.122.22", err)
	}
	if _, err := kubeletServingCert(ctx, d.dial, "192.168.122.21", KubeletPort, ca.pool()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("no kubelet: %v", err)
	}
}

func TestKubeletHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("x509: certificate is valid for 192.168.122.21, not 192.168.122.22"), "serving certificate of w2"},
		{errors.New("remote error: tls: internal error"), "kubelet-serving CSR is approved"},
		{apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "w2", errors.New("proxy")), "apiserver-to-kubelet-rbac.yaml"},
		{errors.New("dial tcp 192.168.122.22:10250: connect: connection refused"), "cannot reach the kubelet on w2:10250"},
		{errors.New("something else"), ""},
	} {
		if got := kubeletHint(tc.err, "w2"); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("kubeletHint(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
