package tlsbootstrap

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"

	certsv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ServingSigner is the signer of kubelet serving certs. Upstream does not
// approve its CSRs automatically (kubernetes/kubernetes#73356): a node could
// otherwise ask for a cert naming any host or IP.
const ServingSigner = "kubernetes.io/kubelet-serving"

// ClientSigner is the signer of kubelet client certs, whose CSRs the
// controller-manager's csrapproving controller approves for
// system:bootstrappers (nodeclient) and system:nodes (selfnodeclient).
const ClientSigner = "kubernetes.io/kube-apiserver-client-kubelet"

// ApprovalReason is the condition reason khw writes when it approves.
const ApprovalReason = "KhwServingCSRApproved"

// ServingExpect is what a node's serving CSR must ask for.
type ServingExpect struct {
	// Node is the node name; the requestor must be system:node:<Node>.
	Node string
	// DNSNames and IPs are the exact SANs allowed (the node's name and
	// address, as the kubelet puts its Hostname and InternalIP node addresses).
	DNSNames []string
	IPs      []string
}

// CheckServingCSR decides whether csr is a serving CSR that may be approved
// for e, and returns every reason it may not (empty = approve). It checks the
// signer, that the authenticated requestor (spec.username/groups, set by the
// apiserver, not by the node) is system:node:<node> in system:nodes, that the
// embedded PKCS#10 request's subject is CN=system:node:<node>, O=system:nodes,
// that its DNS and IP SANs are exactly e's with no email or URI SANs, and
// that the usages are digital signature (+ key encipherment) and server auth.
func CheckServingCSR(csr *certsv1.CertificateSigningRequest, e ServingExpect) []string {
	var why []string
	user := "system:node:" + e.Node
	if csr.Spec.SignerName != ServingSigner {
		why = append(why, fmt.Sprintf("signer is %s, not %s", csr.Spec.SignerName, ServingSigner))
	}
	if csr.Spec.Username != user {
		why = append(why, fmt.Sprintf("requested by %q, not %q (only the node itself may ask for its serving cert)", csr.Spec.Username, user))
	}
	if !slices.Contains(csr.Spec.Groups, "system:nodes") {
		why = append(why, fmt.Sprintf("requestor groups %v lack system:nodes", csr.Spec.Groups))
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return append(why, "spec.request is not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return append(why, "spec.request does not parse: "+err.Error())
	}
	if err := req.CheckSignature(); err != nil {
		why = append(why, "the request's signature is invalid: "+err.Error())
	}
	if req.Subject.CommonName != user {
		why = append(why, fmt.Sprintf("subject CN is %q, not %q", req.Subject.CommonName, user))
	}
	if len(req.Subject.Organization) != 1 || req.Subject.Organization[0] != "system:nodes" {
		why = append(why, fmt.Sprintf("subject O is %v, not [system:nodes]", req.Subject.Organization))
	}
	var ips []string
	for _, ip := range req.IPAddresses {
		ips = append(ips, ip.String())
	}
	if d := setDiff(req.DNSNames, e.DNSNames); d != "" {
		why = append(why, "DNS SANs "+d)
	}
	want := make([]string, 0, len(e.IPs))
	for _, ip := range e.IPs {
		if p := net.ParseIP(ip); p != nil {
			want = append(want, p.String())
		}
	}
	if d := setDiff(ips, want); d != "" {
		why = append(why, "IP SANs "+d)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		why = append(why, "the request has email or URI SANs, which a kubelet serving cert never needs")
	}
	hasServer := false
	for _, u := range csr.Spec.Usages {
		switch u {
		case certsv1.UsageServerAuth:
			hasServer = true
		case certsv1.UsageDigitalSignature, certsv1.UsageKeyEncipherment:
		default:
			why = append(why, fmt.Sprintf("usage %q is not allowed for a serving cert", u))
		}
	}
	if !hasServer {
		why = append(why, "usages lack server auth")
	}
	return why
}

// setDiff describes how got differs from want as sets, or "" if equal.
func setDiff(got, want []string) string {
	var extra, missing []string
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	if len(extra) == 0 && len(missing) == 0 {
		return ""
	}
	sort.Strings(extra)
	sort.Strings(missing)
	var parts []string
	if len(extra) > 0 {
		parts = append(parts, "not allowed: "+strings.Join(extra, ", "))
	}
	if len(missing) > 0 {
		parts = append(parts, "missing: "+strings.Join(missing, ", "))
	}
	return strings.Join(parts, "; ")
}

// Approve marks csr approved with ApprovalReason after CheckServingCSR passed;
// it refuses (and writes nothing) when the check fails, returning the reasons.
func Approve(ctx context.Context, cs kubernetes.Interface, csr *certsv1.CertificateSigningRequest, e ServingExpect) error {
	if why := CheckServingCSR(csr, e); len(why) > 0 {
		return fmt.Errorf("CSR %s not approved: %s", csr.Name, strings.Join(why, "; "))
	}
	c := csr.DeepCopy()
	c.Status.Conditions = append(c.Status.Conditions, certsv1.CertificateSigningRequestCondition{
		Type:           certsv1.CertificateApproved,
		Status:         corev1.ConditionTrue,
		Reason:         ApprovalReason,
		Message:        fmt.Sprintf("khw checked: requested by system:node:%s, SANs exactly %v %v", e.Node, e.DNSNames, e.IPs),
		LastUpdateTime: metav1.Now(),
	})
	_, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("approve CSR %s: %w", csr.Name, err)
	}
	return nil
}

// State returns "Approved", "Denied", "Failed" or "Pending", and whether a
// certificate was issued.
func State(csr *certsv1.CertificateSigningRequest) (string, bool) {
	st := "Pending"
	for _, c := range csr.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case certsv1.CertificateApproved:
			st = "Approved"
		case certsv1.CertificateDenied:
			return "Denied", false
		case certsv1.CertificateFailed:
			return "Failed", false
		}
	}
	return st, len(csr.Status.Certificate) > 0
}
