package devenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// CrashAPIServer kills the cluster's kube-apiserver with SIGKILL (a crashed or evicted
// pod: no graceful drain of open requests, which can take the graceful path many
// seconds); StartAPIServer brings it back.
func (c *Cluster) CrashAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	port := c.Env.ControlPlane.APIServer.SecurePort
	pid, err := pidServing(port)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	// envtest reaps it; once reaped, Stop only updates its own state. Its reaper may
	// not have seen the exit yet, though: Stop then signals a process that is gone.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver (pid %d) did not exit after SIGKILL", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Env.ControlPlane.APIServer.Stop(); err != nil && !errors.Is(err, syscall.ESRCH) && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// pidServing finds the kube-apiserver process started with --secure-port=port.
func pidServing(port int) (int, error) {
	want := []byte("--secure-port=" + strconv.Itoa(port))
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	for _, f := range dirs {
		cmdline, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := bytes.Split(cmdline, []byte{0})
		if len(args) == 0 || filepath.Base(string(args[0])) != "kube-apiserver" {
			continue
		}
		for _, a := range args[1:] {
			if bytes.Equal(a, want) {
				return strconv.Atoi(filepath.Base(filepath.Dir(f)))
			}
		}
	}
	return 0, fmt.Errorf("no kube-apiserver serving on port %d", port)
}
