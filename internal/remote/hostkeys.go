package remote

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/khw-dev/khw/internal/fsutil"
)

// HostKeyChangedError means a node presented a host key other than the one
// pinned for its address in the known_hosts file. khw never retries or
// overrides this by itself.
type HostKeyChangedError struct {
	Node Node
	Addr string // host:port that was dialed
	File string // the known_hosts file
	// Host is the known_hosts host field, e.g. "192.168.122.11" or
	// "[127.0.0.1]:2222" (knownhosts.Normalize).
	Host string
	Got  string   // type and SHA256 fingerprint presented by the node
	Want []string // "file:line type fingerprint" of the pinned key(s)
}

func (e *HostKeyChangedError) Error() string {
	return fmt.Sprintf("node %s (%s): host key changed: the node presented %s but %s pins %s. "+
		"If the node was re-created on purpose (new disk or rootfs), remove the old entry with "+
		"`ssh-keygen -R '%s' -f %s` and retry; otherwise do not connect: another machine may be answering at %s",
		e.Node.Name, e.Addr, e.Got, e.File, strings.Join(e.Want, ", "), e.Host, e.File, e.Addr)
}

// knownHostsLocks serialises readers and writers of one known_hosts file
// inside this process (several pools may share a state directory).
var knownHostsLocks sync.Map // path -> *sync.Mutex

type hostKeys struct {
	path string
	mu   *sync.Mutex
}

func newHostKeys(path string) *hostKeys {
	m, _ := knownHostsLocks.LoadOrStore(path, &sync.Mutex{})
	return &hostKeys{path: path, mu: m.(*sync.Mutex)}
}

func describeKey(k ssh.PublicKey) string {
	return k.Type() + " " + ssh.FingerprintSHA256(k)
}

// check verifies key for addr against the file, pinning it when the address
// is not in the file yet (trust on first use).
func (h *hostKeys) check(n Node, addr string, remote net.Addr, key ssh.PublicKey) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	data, err := os.ReadFile(h.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("node %s: read known_hosts %s: %w", n.Name, h.path, err)
	}
	host := knownhosts.Normalize(addr)
	if len(data) > 0 {
		cb, err := knownhosts.New(h.path)
		if err != nil {
			return fmt.Errorf("node %s: parse known_hosts %s: %w; fix or remove the bad line", n.Name, h.path, err)
		}
		err = cb(addr, remote, key)
		if err == nil {
			return nil
		}
		var ke *knownhosts.KeyError
		if !errors.As(err, &ke) {
			return fmt.Errorf("node %s (%s): host key %s refused by %s: %w", n.Name, addr, describeKey(key), h.path, err)
		}
		if len(ke.Want) > 0 {
			hk := &HostKeyChangedError{Node: n, Addr: addr, File: h.path, Host: host, Got: describeKey(key)}
			for _, w := range ke.Want {
				hk.Want = append(hk.Want, fmt.Sprintf("%s:%d %s", w.Filename, w.Line, describeKey(w.Key)))
			}
			return hk
		}
	}
	// First contact: pin the key.
	var buf bytes.Buffer
	buf.Write(data)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		buf.WriteByte('\n')
	}
	buf.WriteString(knownhosts.Line([]string{host}, key))
	buf.WriteByte('\n')
	if err := fsutil.WriteFileAtomic(h.path, buf.Bytes(), fsutil.SecretMode); err != nil {
		return fmt.Errorf("node %s: pin host key in %s: %w", n.Name, h.path, err)
	}
	return nil
}

// algorithms returns the host key algorithms to ask for when addr already
// has pinned keys, so that a server offering several key types presents the
// pinned one; nil (library defaults) when nothing is pinned.
func (h *hostKeys) algorithms(addr string) []string {
	h.mu.Lock()
	data, err := os.ReadFile(h.path)
	h.mu.Unlock()
	if err != nil {
		return nil
	}
	host := knownhosts.Normalize(addr)
	var algos []string
	for len(data) > 0 {
		marker, hosts, key, _, rest, err := ssh.ParseKnownHosts(data)
		if err != nil {
			break
		}
		data = rest
		if marker != "" || !slices.Contains(hosts, host) {
			continue
		}
		switch key.Type() {
		case ssh.KeyAlgoRSA:
			algos = append(algos, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			algos = append(algos, key.Type())
		}
	}
	return algos
}
