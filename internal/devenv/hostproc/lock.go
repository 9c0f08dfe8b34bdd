package hostproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Lock takes a host-wide exclusive lock (flock on a file in /tmp, shared by every test
// binary whatever its TMPDIR), waiting up to timeout. Closing the file releases it, as
// does the process ending.
func Lock(name string, timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join("/tmp", name+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, err
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("lock /tmp/%s.lock still held after %s", name, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
