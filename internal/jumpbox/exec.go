package jumpbox

import (
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Exec replaces the calling process with argv[0] (looked up in the Session's
// PATH) run with argv, the environment s.Environ(os.Environ()), and the
// Session's namespaces. On success it does not return: the program takes
// over khw's process (same pid, same terminal), so its exit code is the
// exit code the caller's shell sees. It returns an error only when the
// program cannot be started.
//
// The steps, on one goroutine locked to its OS thread, because namespaces
// belong to threads and execve(2) keeps the calling thread's:
//
//  1. when s.Hosts is set: unshare(2) CLONE_NEWNS, giving the thread its own
//     mount namespace; mark every mount of it MS_SLAVE|MS_REC, so mounts the
//     host makes later still appear here but nothing done here leaks back;
//     bind-mount s.Hosts over /etc/hosts (mount(2) MS_BIND). This is what
//     `ip netns exec` does with /etc/netns/<ns>/hosts (iproute2
//     lib/namespace.c netns_switch and ip/ipnetns.c bind_etc). Unlike ip
//     netns exec, /sys is not remounted: it would hide /sys/fs/cgroup, which
//     khw itself (nspawn nodes) needs when run from the shell; use
//     `ip link`, not /sys/class/net, to see the namespace's interfaces.
//  2. when s.Netns is set: setns(2) into that network namespace.
//  3. execve(2).
//
// The thread is never unlocked: if a step fails it has namespaces no other
// goroutine may inherit, so the Go runtime ends it with the goroutine.
// Needs root (CAP_SYS_ADMIN) for steps 1 and 2.
func (s *Session) Exec(argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("cluster %s: no command to run", s.Cluster)
	}
	prog, err := LookPath(argv[0], s.Getenv("PATH"))
	if err != nil {
		return err
	}
	env := s.Environ(os.Environ())
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- s.enterAndExec(prog, argv, env)
	}()
	return <-errc
}

func (s *Session) enterAndExec(prog string, argv, env []string) error {
	if s.Hosts != "" {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("new mount namespace for the hosts file: unshare(CLONE_NEWNS): %w (khw shell needs root)", err)
		}
		if err := unix.Mount("none", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("make / a recursive slave mount in the new mount namespace: %w", err)
		}
		if err := unix.Mount(s.Hosts, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount %s over /etc/hosts: %w (the host needs an /etc/hosts file to mount over)", s.Hosts, err)
		}
	}
	if s.Netns != "" {
		fd, err := unix.Open(s.Netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open network namespace %s: %w (fix: run `khw up`)", s.Netns, err)
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("enter network namespace %s: setns: %w (khw shell needs root)", s.Netns, err)
		}
	}
	err := syscall.Exec(prog, argv, env)
	return fmt.Errorf("run %s: %w", prog, err)
}
