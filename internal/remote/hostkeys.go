package remote

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/khw-dev/khw/internal/fsutil"
	"github.com/khw-dev/khw/internal/lab/labid"
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
		"The pin is the key khw generated for this node and installed through its image (a node made by an older khw: "+
		"the key it presented first). Do not connect: another machine may be answering at %s. "+
		"If the node was re-made outside khw, `khw down` and `khw up` make it anew with a pinned key; "+
		"`ssh-keygen -R '%s' -f %s` removes the pin by hand",
		e.Node.Name, e.Addr, e.Got, e.File, strings.Join(e.Want, ", "), e.Addr, e.Host, e.File)
}

// HostKeyNotPinnedError means a node presented a host key while its
// address has no entry in the known_hosts file. khw does not trust a key on
// first use: the pin must be written (PinHostKey) before the first
// connection, so this is never retried.
type HostKeyNotPinnedError struct {
	Node Node
	Addr string // host:port that was dialed
	File string // the known_hosts file
	Host string // the known_hosts host field that was looked up
	Got  string // type and SHA256 fingerprint presented by the node
}

func (e *HostKeyNotPinnedError) Error() string {
	return fmt.Sprintf("node %s (%s): refusing host key %s: %s pins no key for %s, and khw never trusts a key on first use. "+
		"khw pins the host key it generates for each node before the node's first boot: run `khw up` (step "+labid.Machines+" writes the pins); "+
		"a node khw did not make is not trusted",
		e.Node.Name, e.Addr, e.Got, e.File, e.Host)
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

// check verifies key for addr against the file. An address with no entry
// is refused (*HostKeyNotPinnedError), a different key too
// (*HostKeyChangedError); the file is never written here.
func (h *hostKeys) check(n Node, addr string, remote net.Addr, key ssh.PublicKey) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	host := knownhosts.Normalize(addr)
	_, err := h.lookup(addr, remote, key)
	var ke *knownhosts.KeyError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNothingPinned) || errors.As(err, &ke) && len(ke.Want) == 0:
		return &HostKeyNotPinnedError{Node: n, Addr: addr, File: h.path, Host: host, Got: describeKey(key)}
	case errors.As(err, &ke):
		hk := &HostKeyChangedError{Node: n, Addr: addr, File: h.path, Host: host, Got: describeKey(key)}
		for _, w := range ke.Want {
			hk.Want = append(hk.Want, fmt.Sprintf("%s:%d %s", w.Filename, w.Line, describeKey(w.Key)))
		}
		return hk
	default:
		return fmt.Errorf("node %s (%s): host key %s refused by %s: %w", n.Name, addr, describeKey(key), h.path, err)
	}
}

var errNothingPinned = errors.New("known_hosts is empty or missing")

// lookup runs knownhosts' callback for addr and key over the file, with the
// file's bytes; h.mu must be held. errNothingPinned: no file or an empty
// one; *knownhosts.KeyError: key is not pinned for addr (Want lists the
// keys that are, none when addr has no entry); another error: the file is
// unreadable or bad, or the key is revoked.
func (h *hostKeys) lookup(addr string, remote net.Addr, key ssh.PublicKey) ([]byte, error) {
	data, err := os.ReadFile(h.path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(bytes.TrimSpace(data)) == 0 {
		return data, errNothingPinned
	}
	if err != nil {
		return nil, fmt.Errorf("read known_hosts %s: %w", h.path, err)
	}
	cb, err := knownhosts.New(h.path)
	if err != nil {
		return nil, fmt.Errorf("parse known_hosts %s: %w; fix or remove the bad line", h.path, err)
	}
	if remote == nil {
		// knownhosts matches the dialed name; the remote address only adds
		// a second lookup by IP, which khw's pins (written per dialed
		// address) do not need.
		remote = &net.TCPAddr{IP: net.IPv4zero}
	}
	return data, cb(addr, remote, key)
}

// pin appends "<host> <key>" for addr unless the file already has an entry
// for addr: it returns nil when key is pinned afterwards (written now or
// already there), and the keys pinned for addr when they are others (the
// file is then left as it is).
func (h *hostKeys) pin(addr string, key ssh.PublicKey) ([]ssh.PublicKey, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	data, err := h.lookup(addr, nil, key)
	var ke *knownhosts.KeyError
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &ke) && len(ke.Want) > 0:
		var others []ssh.PublicKey
		for _, w := range ke.Want {
			others = append(others, w.Key)
		}
		return others, nil
	case errors.Is(err, errNothingPinned) || errors.As(err, &ke):
	default:
		return nil, err
	}
	var buf bytes.Buffer
	buf.Write(data)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		buf.WriteByte('\n')
	}
	buf.WriteString(knownhosts.Line([]string{knownhosts.Normalize(addr)}, key))
	buf.WriteByte('\n')
	if err := fsutil.WriteFileAtomic(h.path, buf.Bytes(), fsutil.SecretMode); err != nil {
		return nil, fmt.Errorf("pin host key in %s: %w", h.path, err)
	}
	return nil, nil
}

// PinHostKey records key as the SSH host key of n in the pool's known_hosts
// file (one "<host> <key>" line, host as knownhosts.Normalize writes n's
// address with the pool's port, file 0600, written atomically) unless the
// file already has an entry for that address. Call it before the first
// connection to n: the pool refuses any node whose address has no entry
// (*HostKeyNotPinnedError).
//
// It returns nil, nil when key is pinned afterwards (written now or found),
// and the keys already pinned for the address when they are others: the
// file is then left as it is, so a node keeps the identity it was pinned
// with (connecting to it verifies against those keys). Errors: the file
// cannot be read, parsed or written, or key is marked @revoked there.
func (p *Pool) PinHostKey(n Node, key ssh.PublicKey) ([]ssh.PublicKey, error) {
	if n.Addr == "" || key == nil {
		return nil, fmt.Errorf("remote: pin host key of node %q: need an address and a key", n.Name)
	}
	others, err := p.hosts.pin(n.hostPort(p.cfg.Port), key)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return others, nil
}

// PinnedHostKeyAlgorithms returns the host key algorithms that match the
// keys knownHostsFile pins for addr ("host" or "host:port"; port 22 is the
// plain host), in file order, e.g. ["ssh-ed25519"], or
// ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] for an RSA key; nil when the
// file has no entry for addr or cannot be read. For ssh_config(5)
// HostKeyAlgorithms, so OpenSSH asks the node for the pinned key's type.
func PinnedHostKeyAlgorithms(knownHostsFile, addr string) []string {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "22")
	}
	return newHostKeys(knownHostsFile).algorithms(addr)
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

// HostKeyFile is the file name of a node's generated SSH host key, the one
// sshd reads by default (sshd(8) FILES: /etc/ssh/ssh_host_ed25519_key); the
// public half is HostKeyFile+".pub".
const HostKeyFile = "ssh_host_ed25519_key"

// HostKey is an SSH host key khw generated for one node on the jumpbox
// (EnsureHostKey), installed on the node by its provider and pinned in
// known_hosts before the node is first reached.
type HostKey struct {
	// Dir holds HostKeyFile (private, 0600) and HostKeyFile.pub (0644).
	Dir string
	// Private is the private key as OpenSSH writes it ("BEGIN OPENSSH
	// PRIVATE KEY" PEM, unencrypted), what sshd reads from its HostKey
	// file and cloud-init's ssh_keys.ed25519_private takes.
	Private []byte
	// Public is the public key; Public.Type() is ssh.KeyAlgoED25519.
	Public ssh.PublicKey
	// Comment ends the .pub line ("root@<node>", as ssh-keygen -A names
	// host keys).
	Comment string
}

// PrivatePath is Dir/ssh_host_ed25519_key.
func (k *HostKey) PrivatePath() string { return filepath.Join(k.Dir, HostKeyFile) }

// PublicPath is Dir/ssh_host_ed25519_key.pub.
func (k *HostKey) PublicPath() string { return k.PrivatePath() + ".pub" }

// PublicLine is the content of the .pub file without the newline:
// "ssh-ed25519 AAAA… root@<node>".
func (k *HostKey) PublicLine() string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.Public))) + " " + k.Comment
}

// EnsureHostKey returns the SSH host key of node kept in dir, generating it
// on the first call: an ed25519 key (crypto/ed25519 from crypto/rand),
// written as dir/ssh_host_ed25519_key (OpenSSH PEM, 0600) and
// dir/ssh_host_ed25519_key.pub (0644, "ssh-ed25519 AAAA… root@<node>");
// dir is made 0700. Later calls read the same key back (the .pub file is
// rewritten from the private key when it differs), so a node's identity
// never changes while the files exist. The private file is created with a
// hard link from a fsynced temporary file, so two concurrent first calls
// both end up with the one key that won, and an existing key is never
// replaced. A key file with group/other bits is tightened to 0600.
//
// Errors name the file: unreadable, passphrase-protected, not an OpenSSH
// private key, or not ed25519 (move it away and khw generates a new one).
func EnsureHostKey(dir, node string) (*HostKey, error) {
	k := &HostKey{Dir: dir, Comment: "root@" + node}
	path := k.PrivatePath()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if data, err = createHostKey(path, k.Comment); err != nil {
			return nil, fmt.Errorf("node %s: %w", node, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("node %s: read SSH host key %s: %w", node, path, err)
	}
	if st, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("node %s: stat SSH host key %s: %w", node, path, err)
	} else if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, fsutil.SecretMode); err != nil {
			return nil, fmt.Errorf("node %s: SSH host key %s has mode %04o; tighten it to 0600: %w", node, path, st.Mode().Perm(), err)
		}
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("node %s: SSH host key %s is not an unencrypted OpenSSH private key: %w; move it away and khw generates a new one", node, path, err)
	}
	if t := signer.PublicKey().Type(); t != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("node %s: SSH host key %s is %s, khw pins only %s; move it away and khw generates a new one", node, path, t, ssh.KeyAlgoED25519)
	}
	k.Private, k.Public = data, signer.PublicKey()
	if _, err := fsutil.WriteIfChanged(k.PublicPath(), []byte(k.PublicLine()+"\n"), fsutil.PublicMode); err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	return k, nil
}

// createHostKey generates an ed25519 key and creates path with it unless
// path exists by then; it returns what path holds afterwards.
func createHostKey(path, comment string) ([]byte, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate SSH host key %s: %w", path, err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("encode SSH host key %s: %w", path, err)
	}
	data := pem.EncodeToMemory(block)
	dir := filepath.Dir(path)
	if err := fsutil.EnsureDir(dir); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write SSH host key %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(fsutil.SecretMode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write SSH host key %s: %w", path, err)
	}
	// link(2) fails with EEXIST instead of replacing: the first key stays.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("write SSH host key %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	out, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read SSH host key %s: %w", path, err)
	}
	return out, nil
}
