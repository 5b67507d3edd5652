// Package remote is how khw reaches the cluster nodes: one SSH connection per
// node (golang.org/x/crypto/ssh), commands run through exec sessions, files
// pushed through SFTP (github.com/pkg/sftp) and installed atomically.
//
// Trust model: a node's SSH host key is pinned in a known_hosts file in the
// state directory (OpenSSH known_hosts format, see sshd(8) "SSH_KNOWN_HOSTS
// FILE FORMAT") BEFORE khw first connects to it: the providers install a
// host key khw generated on the jumpbox (EnsureHostKey) through the node's
// image, and the caller pins it with Pool.PinHostKey. Every connection must
// present a pinned key; an address with no pin is refused
// (*HostKeyNotPinnedError, no trust on first use) and so is a different key
// (*HostKeyChangedError), with an error naming the node, the file and the
// fix. Host keys are never ignored and never re-pinned by a connection.
//
// Authentication uses one ed25519 key that khw generates into the state
// directory (EnsureKey); its public half goes into the node's
// ~/.ssh/authorized_keys through the provider's seed (cloud-init, nspawn).
// khw logs in as an unprivileged user (ubuntu by default) and runs commands
// that need root through `sudo -n`, so a missing NOPASSWD rule fails at once
// instead of hanging on a password prompt.
package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// Defaults used when the matching Config field is zero.
const (
	DefaultUser             = "ubuntu"
	DefaultPort             = 22
	DefaultConnectTimeout   = 3 * time.Minute
	DefaultHandshakeTimeout = 15 * time.Second
	DefaultInitialBackoff   = 250 * time.Millisecond
	DefaultMaxBackoff       = 5 * time.Second
	// DefaultMaxSessions keeps concurrent exec sessions on one connection
	// below OpenSSH's MaxSessions (10, sshd_config(5)); one more session is
	// used by SFTP.
	DefaultMaxSessions = 8
)

// DialFunc opens the transport connection to addr ("host:port"). The nspawn
// provider passes one that dials inside the cluster's network namespace.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Config says how a Pool reaches its nodes. Signer and KnownHostsFile are
// required; every other zero field takes the Default* value above.
type Config struct {
	// User is the login user on every node (default "ubuntu"). When it is
	// "root", RunOptions.Sudo is a no-op and Install uploads directly into the
	// target directory.
	User string
	// Signer is the client private key (see EnsureKey).
	Signer ssh.Signer
	// KnownHostsFile is the known_hosts file in the state directory that
	// pins the nodes' host keys (written by PinHostKey, 0600). A node
	// whose address it does not list is refused.
	KnownHostsFile string
	// Port is used when a Node's Addr has no port (default 22).
	Port int
	// Dial opens the TCP connection (default: a net.Dialer).
	Dial DialFunc
	// ConnectTimeout bounds all connection attempts to one node, retries
	// included (default 3m: nodes may still be booting). The context passed
	// to Pool.Get can end it earlier.
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds one attempt's TCP connect plus SSH handshake
	// and authentication (default 15s).
	HandshakeTimeout time.Duration
	// InitialBackoff and MaxBackoff shape the exponential backoff between
	// attempts (defaults 250ms doubling up to 5s).
	InitialBackoff, MaxBackoff time.Duration
	// MaxSessions caps concurrent Run calls on one connection (default 8);
	// extra calls wait for a free slot.
	MaxSessions int
}

func (c Config) withDefaults() (Config, error) {
	if c.Signer == nil {
		return c, errors.New("remote: Config.Signer is nil; load the cluster SSH key with remote.EnsureKey(<state dir>/ssh/id_ed25519)")
	}
	if c.KnownHostsFile == "" {
		return c, errors.New("remote: Config.KnownHostsFile is empty; set it to <state dir>/ssh/known_hosts")
	}
	if c.User == "" {
		c.User = DefaultUser
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Dial == nil {
		d := &net.Dialer{}
		c.Dial = d.DialContext
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = DefaultInitialBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxBackoff < c.InitialBackoff {
		c.MaxBackoff = c.InitialBackoff
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	return c, nil
}

// Node names one SSH endpoint. Name is used in every error message (cp1,
// w3 …); Addr is "host" or "host:port" (IPv6 literals in brackets when a
// port is given), e.g. Node{Name: n.Name, Addr: n.IP} for a config.Node.
type Node struct {
	Name string
	Addr string
}

func (n Node) hostPort(defPort int) string {
	if _, _, err := net.SplitHostPort(n.Addr); err == nil {
		return n.Addr
	}
	return net.JoinHostPort(n.Addr, strconv.Itoa(defPort))
}

// Pool holds at most one live SSH connection per Node, dialed lazily on
// first use and redialed when it has dropped (e.g. the node rebooted). It is
// safe for concurrent use.
type Pool struct {
	cfg   Config
	hosts *hostKeys

	mu      sync.Mutex
	entries map[Node]*entry
	closed  bool
	// uploadsOfClosed keeps the upload count of clients replaced after
	// their connection dropped.
	uploadsOfClosed atomic.Int64
}

type entry struct {
	sem chan struct{} // 1-slot lock that honours contexts while dialing
	c   *Client
}

// NewPool checks cfg and returns an empty Pool. It dials nothing.
func NewPool(cfg Config) (*Pool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Pool{cfg: cfg, hosts: newHostKeys(cfg.KnownHostsFile), entries: map[Node]*entry{}}, nil
}

// Get returns the connected Client for n, dialing it (with retries, see
// Config.ConnectTimeout) when there is none or the old one has dropped.
// Concurrent callers for the same node share one dial.
func (p *Pool) Get(ctx context.Context, n Node) (*Client, error) {
	if n.Name == "" || n.Addr == "" {
		return nil, fmt.Errorf("remote: node %+v needs both Name and Addr", n)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("remote: node %s: pool is closed", n.Name)
	}
	e := p.entries[n]
	if e == nil {
		e = &entry{sem: make(chan struct{}, 1)}
		p.entries[n] = e
	}
	p.mu.Unlock()

	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("node %s (%s): waiting for connection: %w", n.Name, n.Addr, ctx.Err())
	}
	defer func() { <-e.sem }()
	if e.c != nil && !e.c.isDead() {
		return e.c, nil
	}
	if e.c != nil {
		p.uploadsOfClosed.Add(e.c.Uploads())
		e.c.Close()
		e.c = nil
	}
	c, err := p.connect(ctx, n)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return nil, fmt.Errorf("remote: node %s: pool is closed", n.Name)
	}
	e.c = c
	p.mu.Unlock()
	return c, nil
}

// Run runs cmd on n as Client.Run does, through the pool's connection to
// n. When that connection turns out to be dead before the command could
// start (ErrSessionNotOpened: the node rebooted or was reverted since the
// connection was made), it redials once and runs cmd on the new
// connection; a command that started is never run twice.
func (p *Pool) Run(ctx context.Context, n Node, cmd string, opts RunOptions) (stdout, stderr []byte, err error) {
	for attempt := 0; ; attempt++ {
		cl, err := p.Get(ctx, n)
		if err != nil {
			return nil, nil, err
		}
		stdout, stderr, err = cl.Run(ctx, cmd, opts)
		if attempt == 0 && errors.Is(err, ErrSessionNotOpened) && p.forget(ctx, n, cl) {
			continue
		}
		return stdout, stderr, err
	}
}

// forget drops cl from n's entry (closing it) so that the next Get dials
// anew; false when ctx ended first.
func (p *Pool) forget(ctx context.Context, n Node, cl *Client) bool {
	p.mu.Lock()
	e := p.entries[n]
	p.mu.Unlock()
	if e == nil {
		return true
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	defer func() { <-e.sem }()
	if e.c == cl {
		p.uploadsOfClosed.Add(cl.Uploads())
		cl.Close()
		e.c = nil
	}
	return true
}

// Uploads returns how many files all of this pool's clients have uploaded
// (content transfers by Install; mode/owner fixes do not count).
func (p *Pool) Uploads() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, e := range p.entries {
		if c := e.c; c != nil {
			n += c.Uploads()
		}
	}
	return n + p.uploadsOfClosed.Load()
}

// Close closes every connection and makes later Get calls fail.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	entries := p.entries
	p.entries = map[Node]*entry{}
	p.mu.Unlock()
	var errs []error
	for _, e := range entries {
		e.sem <- struct{}{}
		if e.c != nil {
			if err := e.c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		<-e.sem
	}
	return errors.Join(errs...)
}

// Client is one SSH connection to one node. Its methods are safe for
// concurrent use.
type Client struct {
	Node Node
	cfg  Config
	conn *ssh.Client
	// root is true when the login user is root (no sudo, direct SFTP staging).
	root bool
	// stageViaTmp forces the non-root install path (tests use it while logged
	// in as root).
	stageViaTmp bool

	sessions chan struct{}
	dead     chan struct{}

	sftpMu sync.Mutex
	sftp   *sftp.Client

	uploads atomic.Int64
}

func (c *Client) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// User returns the login user of this connection.
func (c *Client) User() string { return c.cfg.User }

// Uploads returns how many file contents Install has transferred over this
// connection.
func (c *Client) Uploads() int64 { return c.uploads.Load() }

// Close closes the SFTP session and the SSH connection.
func (c *Client) Close() error {
	c.sftpMu.Lock()
	if c.sftp != nil {
		c.sftp.Close()
		c.sftp = nil
	}
	c.sftpMu.Unlock()
	return c.conn.Close()
}

func (c *Client) sftpClient() (*sftp.Client, error) {
	c.sftpMu.Lock()
	defer c.sftpMu.Unlock()
	if c.sftp != nil {
		return c.sftp, nil
	}
	// Concurrent writes keep many WRITE requests in flight instead of one
	// per round trip: a 75 MB kubelet is 2,300 packets of 32 KiB, and over
	// a slow link (a TCG VM answers in tens of ms) the round trips, not the
	// bytes, set the time. A failed upload can leave holes in the staging
	// file; Install removes it and never moves it into place.
	s, err := sftp.NewClient(c.conn, sftp.UseConcurrentWrites(true))
	if err != nil {
		return nil, fmt.Errorf("node %s (%s): start SFTP subsystem: %w; check that sshd_config has \"Subsystem sftp\"", c.Node.Name, c.Node.Addr, err)
	}
	c.sftp = s
	return s, nil
}

// ForEach runs fn once per node with at most limit calls in flight (limit
// <= 0 means all at once), each with the node's pooled Client. It waits for
// every call and returns the errors joined (errors.Join) in the order of
// nodes, each prefixed with "node <name>: "; a failure on one node does not
// stop the others. A node that cannot be connected counts as its error.
func (p *Pool) ForEach(ctx context.Context, nodes []Node, limit int, fn func(ctx context.Context, c *Client) error) error {
	if limit <= 0 || limit > len(nodes) {
		limit = len(nodes)
	}
	errs := make([]error, len(nodes))
	slots := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				errs[i] = fmt.Errorf("node %s: %w", n.Name, ctx.Err())
				return
			}
			defer func() { <-slots }()
			c, err := p.Get(ctx, n)
			if err == nil {
				err = fn(ctx, c)
			}
			if err != nil {
				errs[i] = fmt.Errorf("node %s: %w", n.Name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// DialContext opens a TCP connection from the node to addr ("127.0.0.1:8404")
// through the SSH connection (an SSH "direct-tcpip" channel, RFC 4254 §7.2,
// what `ssh -L` uses). It reaches services that listen only on the node's
// loopback, such as HAProxy's stats page. network must be "tcp", "tcp4" or
// "tcp6".
func (c *Client) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := c.conn.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("node %s: connect to %s through SSH: %w", c.Node.Name, addr, err)
	}
	return conn, nil
}
