package libvirt

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// DefaultURI is the libvirt connection khw uses unless cluster.yaml's
// libvirt.uri says otherwise: the system QEMU driver, reached over the unix
// socket /var/run/libvirt/libvirt-sock.
const DefaultURI = "qemu:///system"

// Connect opens a libvirt RPC connection to uri (DefaultURI when empty)
// with go-libvirt. Errors say what to do: install or start libvirtd when the
// socket is missing or refuses, join the libvirt group when access is
// denied.
func Connect(uri string) (*golibvirt.Libvirt, error) {
	if uri == "" {
		uri = DefaultURI
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("libvirt URI %q: %w; use qemu:///system", uri, err)
	}
	l, err := golibvirt.ConnectToURI(u)
	if err != nil {
		return nil, explainConnectError(uri, err)
	}
	return l, nil
}

func explainConnectError(uri string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("libvirt %s: %w: libvirtd is not running or not installed; install it (apt-get install libvirt-daemon-system qemu-system) and start it (systemctl start libvirtd)", uri, err)
	case errors.Is(err, syscall.EACCES), strings.Contains(err.Error(), "authentication"), strings.Contains(err.Error(), "ermission denied"):
		return fmt.Errorf("libvirt %s: %w: this user may not use the system libvirtd; add it to the libvirt group (sudo usermod -aG libvirt $USER, then log in again) or run khw with sudo", uri, err)
	default:
		return fmt.Errorf("libvirt %s: %w", uri, err)
	}
}

// isLibvirtErr reports whether err is a libvirt RPC error with code.
func isLibvirtErr(err error, code golibvirt.ErrorNumber) bool {
	var le golibvirt.Error
	if errors.As(err, &le) {
		return le.Code == uint32(code)
	}
	return false
}
