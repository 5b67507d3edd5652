package drill

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"
)

// Signal names one thing the prober watches.
type Signal string

// The signals, each sampled on its own schedule (see Prober).
const (
	// SigAPIRead: GET /api/v1/namespaces/kube-system through the load
	// balancer on a new connection. Without a resourceVersion this is a
	// quorum read: it needs etcd to have a leader.
	SigAPIRead Signal = "api-read"
	// SigAPIWrite: a merge-patch of ConfigMap khw-drill/probe through the
	// load balancer on a new connection (one raft proposal).
	SigAPIWrite Signal = "api-write"
	// SigEtcd: every member's Status (health.Etcd). OK means a leader and
	// every member healthy; EtcdState.Quorum tells a lost quorum apart.
	SigEtcd Signal = "etcd"
	// SigAPIServers: GET /readyz on each apiserver directly (not through the
	// load balancer). OK means every control plane is ready.
	SigAPIServers Signal = "apiservers"
	// SigLeases: the kube-controller-manager and kube-scheduler Leases. OK
	// means both were read and both holders renew within the lease duration.
	SigLeases Signal = "leases"
	// SigHAProxy: HAProxy's view of its backends (the stats CSV, read on the
	// load balancer through SSH). OK means every backend is UP.
	SigHAProxy Signal = "haproxy"
	// SigWorkload: GET /hostname from the drill's web pod on every worker
	// (NodePort with externalTrafficPolicy Local, so each worker answers from
	// its own pod). OK means every worker answered. This is the data plane:
	// it needs neither the API nor etcd.
	SigWorkload Signal = "workload"
	// SigNodes: the Ready condition of every Node object (read through the
	// load balancer). OK means all Ready.
	SigNodes Signal = "nodes"
)

// Signals lists every signal in report order.
var Signals = []Signal{SigAPIRead, SigAPIWrite, SigEtcd, SigAPIServers, SigLeases, SigHAProxy, SigWorkload, SigNodes}

// Sample is one probe of one signal.
type Sample struct {
	Signal Signal `json:"signal"`
	// At is when the probe was sent; Latency how long it took to answer or
	// fail (JSON: nanoseconds).
	At      time.Time     `json:"at"`
	Latency time.Duration `json:"latencyNs"`
	// OK is the signal's healthy state (see each Signal); Err why not, on
	// one line.
	OK  bool   `json:"ok"`
	Err string `json:"error,omitempty"`

	// Etcd: the leader's node name ("" none), the highest raft term seen,
	// how many members answered healthy, whether there is quorum.
	Etcd *EtcdState `json:"etcd,omitempty"`
	// Leases: lease name → holder node and leaseTransitions.
	Leases map[string]LeaseState `json:"leases,omitempty"`
	// Parts: per-part states of a signal made of several parts: HAProxy
	// backend → status ("UP", "DOWN", "UP 1/2" …); worker → "" when it
	// answered, else the error; node → "Ready" / "NotReady" / "Unknown";
	// control plane → "" when /readyz said ok, else the reason.
	Parts map[string]string `json:"parts,omitempty"`

	// flight is the Prober's number for the probe that made the sample,
	// until the consumer has observed it (Prober.Done).
	flight uint64
}

// EtcdState is the part of an etcd sample the report uses.
type EtcdState struct {
	Leader  string `json:"leader"`
	Term    uint64 `json:"term"`
	Healthy int    `json:"healthy"`
	Quorum  bool   `json:"quorum"`
}

// LeaseState is one leader-election Lease in a sample.
type LeaseState struct {
	Holder      string `json:"holder"`
	Transitions int32  `json:"transitions"`
	Fresh       bool   `json:"fresh"`
}

// AppendSamples appends samples to the JSON-lines file path (one Sample per
// line), creating it 0600.
func AppendSamples(path string, samples []Sample) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadSamples reads a file written by AppendSamples and returns the samples
// sorted by At. A missing file is no samples. A torn last line (the writer
// was killed mid-write) is skipped; any other bad line is an error naming
// the line.
func ReadSamples(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Sample
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	line := 0
	var pending error
	for sc.Scan() {
		line++
		if pending != nil {
			return nil, pending
		}
		var s Sample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			pending = fmt.Errorf("%s line %d: %w", path, line, err)
			continue
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	SortSamples(out)
	return out, nil
}

// SortSamples sorts by At (stable, so equal times keep file order).
func SortSamples(s []Sample) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].At.Before(s[j].At) })
}
