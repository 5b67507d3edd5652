package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/crypto/ssh"
)

// ConnectError is returned by Pool.Get when no attempt to reach a node
// succeeded before the deadline (Config.ConnectTimeout or the context).
type ConnectError struct {
	Node     Node
	Addr     string // host:port that was dialed
	User     string
	Attempts int
	Elapsed  time.Duration
	Canceled bool  // the caller's context ended (not the connect timeout)
	Last     error // error of the last attempt
}

func (e *ConnectError) Error() string {
	why := "gave up"
	if e.Canceled {
		why = "canceled"
	}
	return fmt.Sprintf("node %s (%s): cannot connect as %s: %s after %d attempt(s) in %s: %v; "+
		"check that the node is running and sshd listens on %s, and that ~%s/.ssh/authorized_keys on the node holds khw's public key",
		e.Node.Name, e.Addr, e.User, why, e.Attempts, e.Elapsed.Round(time.Millisecond), e.Last, e.Addr, e.User)
}

func (e *ConnectError) Unwrap() error { return e.Last }

// connect dials n until it succeeds, a host key is refused (changed, or
// not pinned at all), or the deadline passes. Backoff doubles from InitialBackoff up to MaxBackoff.
func (p *Pool) connect(ctx context.Context, n Node) (*Client, error) {
	addr := n.hostPort(p.cfg.Port)
	start := time.Now()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ConnectTimeout)
	defer cancel()
	backoff := p.cfg.InitialBackoff
	attempts := 0
	var last error
	for {
		attempts++
		c, err := p.dialOnce(ctx, n, addr)
		if err == nil {
			return c, nil
		}
		var hk *HostKeyChangedError
		var np *HostKeyNotPinnedError
		if errors.As(err, &hk) || errors.As(err, &np) {
			return nil, err // retrying cannot help; a human must decide
		}
		last = err
		deadline, _ := ctx.Deadline()
		if ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			break
		}
		backoff = min(backoff*2, p.cfg.MaxBackoff)
	}
	return nil, &ConnectError{
		Node: n, Addr: addr, User: p.cfg.User, Attempts: attempts,
		Elapsed: time.Since(start), Canceled: parent.Err() != nil, Last: last,
	}
}

// dialOnce makes one TCP connection plus SSH handshake, bounded by
// HandshakeTimeout.
func (p *Pool) dialOnce(ctx context.Context, n Node, addr string) (*Client, error) {
	actx, cancel := context.WithTimeout(ctx, p.cfg.HandshakeTimeout)
	defer cancel()
	conn, err := p.cfg.Dial(actx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	var hostErr error
	cc := &ssh.ClientConfig{
		User: p.cfg.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(p.cfg.Signer)},
		HostKeyCallback: func(hostname string, remote net.Addr, key ssh.PublicKey) error {
			hostErr = p.hosts.check(n, addr, remote, key)
			return hostErr
		},
		HostKeyAlgorithms: p.hosts.algorithms(addr),
	}
	// Closing the conn is the only way to abort a handshake in progress.
	stop := context.AfterFunc(actx, func() { conn.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, cc)
	aborted := !stop()
	if hostErr != nil {
		if sc != nil {
			sc.Close()
		}
		conn.Close()
		return nil, hostErr
	}
	if err != nil {
		conn.Close()
		if aborted {
			return nil, fmt.Errorf("%w (after %v: %v)", actx.Err(), p.cfg.HandshakeTimeout, err)
		}
		return nil, err
	}
	if aborted {
		sc.Close()
		return nil, actx.Err()
	}
	c := &Client{
		Node:     n,
		cfg:      p.cfg,
		conn:     ssh.NewClient(sc, chans, reqs),
		root:     p.cfg.User == "root",
		sessions: make(chan struct{}, p.cfg.MaxSessions),
		dead:     make(chan struct{}),
	}
	go func() {
		c.conn.Wait()
		close(c.dead)
	}()
	return c, nil
}
