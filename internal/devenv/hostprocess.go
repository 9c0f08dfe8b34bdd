package devenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// hostProcess is a binary the test bed runs on the host (etcd, Kamaji, a plane's
// kube-apiserver), with its output in a log file kept for failure messages.
type hostProcess struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set when done is closed
}

// startHostProcess starts bin with args and env, its output appended to logPath.
func startHostProcess(name, bin string, args, env []string, logPath string) (*hostProcess, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Killed with the test binary, even when it crashes: no process outlives its test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &hostProcess{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *hostProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process: SIGTERM, then SIGKILL after grace.
func (p *hostProcess) stop(grace time.Duration) {
	if p == nil || p.exited() {
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

// kill ends the process at once (a crashed container).
func (p *hostProcess) kill() {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tail is the end of the process's log, for error messages.
func (p *hostProcess) tail(lines int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	all := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return string(bytes.Join(all, []byte("\n")))
}

// exitError describes how the process ended, with the end of its log.
func (p *hostProcess) exitError() error {
	return fmt.Errorf("%s exited (%v); log %s ends:\n%s", p.name, p.err, p.log, p.tail(30))
}

// envWithout is the environment of this process without the named variables.
func envWithout(names ...string) []string {
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
