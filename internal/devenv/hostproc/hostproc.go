// Package hostproc runs the test bed's host processes (etcd, Kamaji, a plane's
// kube-apiserver, a worker node's containerd and kubelet, Cluster API's managers), each
// with its output in a log file kept for failure messages, and each killed with the
// process that started it.
package hostproc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is one running host process.
type Process struct {
	Name string
	// Log is the file its output is appended to.
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set when done is closed
}

// Start starts bin with args and env, its output appended to logPath.
func Start(name, bin string, args, env []string, logPath string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	return StartCmd(name, cmd, logPath)
}

// StartCmd starts cmd (its Stdout, Stderr and SysProcAttr are set here), its output
// appended to logPath.
func StartCmd(name string, cmd *exec.Cmd, logPath string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Killed with the test binary, even when it crashes: no process outlives its test.
	// The signal survives exec, so it holds for what nsenter and unshare exec into too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, cmd.Path, err)
	}
	p := &Process{Name: name, cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process: SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Kill ends the process at once (a crashed container).
func (p *Process) Kill() {
	if p == nil || p.Exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Tail is the end of the process's log, for error messages.
func (p *Process) Tail(lines int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	all := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return string(bytes.Join(all, []byte("\n")))
}

// ExitError describes how the process ended, with the end of its log.
func (p *Process) ExitError() error {
	return fmt.Errorf("%s exited (%v); log %s ends:\n%s", p.Name, p.err, p.Log, p.Tail(30))
}

// EnvWithout is the environment of this process without the named variables.
func EnvWithout(names ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		drop := false
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				drop = true
				break
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}
