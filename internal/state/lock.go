package state

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/khw-dev/khw/internal/fsutil"
)

// ErrLocked is returned (wrapped, as a *LockedError) by Lock when another
// khw holds the lock.
var ErrLocked = errors.New("cluster is locked")

// LockedError is Lock's error when another open of the lock file (another
// khw process, or another Lock in this one) holds it. errors.Is(err,
// ErrLocked) is true for it.
type LockedError struct {
	Cluster string
	// Path is the lock file, <root>/.lock.
	Path string
	// PID is the holder's process id as it wrote it into the lock file (0:
	// unknown).
	PID int
}

func (e *LockedError) Error() string {
	who := "unknown"
	if e.PID > 0 {
		who = strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%v: another khw (pid %s) is changing cluster %q; wait for it to finish (lock file %s)", ErrLocked, who, e.Cluster, e.Path)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// LockFile is the name of the lock file in a cluster directory.
const LockFile = ".lock"

// lockContent is everything a lock file khw made can hold: nothing (made,
// not written yet) or the holder's pid and a newline.
var lockContent = regexp.MustCompile(`^[0-9]{0,20}\n?$`)

// maxLockSize bounds what Lock reads of an existing lock file.
const maxLockSize = 64

// Lock takes an exclusive, non-blocking flock(2) on <root>/.lock so two khw
// processes never change one cluster at once (two concurrent `khw pki` runs
// would otherwise write certs signed by different CAs; a `khw lab reset`
// would rsync over the files an `khw up` writes). It creates the cluster
// directory (MkdirAllPrivate: 0700 when it creates it; an existing one keeps
// its mode) and writes the holder's pid into the lock file for the error
// message. The lock is released by the returned function or when the
// process exits. Locks belong to the open file, so a second Lock in the
// same process conflicts too.
//
// The lock file is opened without following a symbolic link (O_NOFOLLOW),
// and an existing one is used only when it is a regular file with one link
// holding at most a pid: anything else (a link to /etc/shadow, a FIFO, a
// file of the user's) is refused, named, and left untouched, so khw never
// truncates a file it did not make. Errors: *LockedError when held;
// otherwise the path and the fix.
func (d Dir) Lock() (unlock func(), err error) {
	if err := fsutil.MkdirAllPrivate(d.Root); err != nil {
		return nil, err
	}
	p := filepath.Join(d.Root, LockFile)
	f, err := openLockFile(p)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid := readPID(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Cluster: d.Name, Path: p, PID: pid}
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	// The file is khw's (openLockFile checked), so its old pid may go.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// openLockFile creates p (O_EXCL, 0600) or opens the existing lock file,
// never through a symbolic link and never a file khw did not make.
func openLockFile(p string) (*os.File, error) {
	const noFollow = syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL|noFollow, fsutil.SecretMode)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", p, err)
		}
		f, err = os.OpenFile(p, os.O_RDWR|noFollow, 0)
		switch {
		case errors.Is(err, fs.ErrNotExist) && attempt < 3:
			continue // removed between the two opens: create it again
		case errors.Is(err, syscall.ELOOP):
			return nil, fmt.Errorf("lock %s is a symbolic link; khw's lock file is a plain file it makes itself, and khw does not write through a link (fix: look at where it points, then remove the link: rm %s)", p, p)
		case err != nil:
			return nil, fmt.Errorf("lock %s: %w", p, err)
		}
		if err := checkLockFile(f, p); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
}

// checkLockFile refuses an existing lock file that khw cannot have made.
func checkLockFile(f *os.File, p string) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("lock %s: %w", p, err)
	}
	notOurs := func(what string) error {
		return fmt.Errorf("lock %s is %s, not a lock file khw made; khw leaves it untouched (fix: move it away, then run again)", p, what)
	}
	if !st.Mode().IsRegular() {
		return notOurs("a " + describeMode(st.Mode()))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink != 1 {
		return notOurs(fmt.Sprintf("a file with %d hard links", sys.Nlink))
	}
	if st.Size() > maxLockSize {
		return notOurs(fmt.Sprintf("a file of %d bytes", st.Size()))
	}
	buf := make([]byte, maxLockSize+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("lock %s: %w", p, err)
	}
	if !lockContent.Match(buf[:n]) {
		return notOurs("a file that holds something other than a process id")
	}
	return nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file (" + m.String() + ")"
}

// readPID reads the holder's pid from the open lock file (0 if none).
func readPID(f *os.File) int {
	buf := make([]byte, maxLockSize)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Locks are the cluster locks one process holds: a command takes the lock
// of the one cluster it changes, and a workflow that runs another under it
// (khw lab 12 runs khw break's drill) takes it again without blocking on
// itself. The zero value holds nothing.
type Locks struct {
	mu    sync.Mutex
	root  string
	depth int
	free  func()
}

// Lock takes d's lock (Dir.Lock), or counts one more holder when this
// process holds it already. The returned release may be called more than
// once; the last holder's release unlocks. Errors: another process holds
// the lock (*LockedError), or this process holds another cluster's.
func (l *Locks) Lock(d Dir) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.depth > 0 {
		if l.root != d.Root {
			return nil, fmt.Errorf("khw holds the lock of %s already; one command works on one cluster", l.root)
		}
	} else {
		if l.free, err = d.Lock(); err != nil {
			return nil, err
		}
		l.root = d.Root
	}
	l.depth++
	var once sync.Once
	return func() { once.Do(l.release) }, nil
}

func (l *Locks) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.depth--; l.depth == 0 {
		l.free()
		l.free, l.root = nil, ""
	}
}
