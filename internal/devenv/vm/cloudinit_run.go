package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// bootstrapSentinel is the file Cluster API's bootstrap data writes once kubeadm
// succeeded (bootstrap/kubeadm/pkg/cloudinit/cloudinit.go sentinelFileCommand).
const bootstrapSentinel = "/run/cluster-api/bootstrap-success.complete"

// runCloudInit plays cloud-init's write_files and runcmd modules, once, as root inside
// the VM, with the output in cloud-init-output.log (where cloud-init writes it). Like
// cloud-init's runcmd script, a failed command does not stop the next; the bootstrap
// succeeded when the sentinel file exists afterwards.
func (v *VM) runCloudInit(cc *CloudConfig) {
	err := v.cloudInit(cc)
	v.mu.Lock()
	v.bootstrap = err
	v.mu.Unlock()
}

func (v *VM) cloudInit(cc *CloudConfig) error {
	log, err := os.OpenFile(filepath.Join(v.dir, "cloud-init-output.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	for _, f := range cc.WriteFiles {
		data, err := f.Decode()
		if err != nil {
			return err
		}
		mode, err := f.Mode()
		if err != nil {
			return err
		}
		p := v.path(f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
		if f.Append {
			flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
		}
		w, err := os.OpenFile(p, flags, os.FileMode(mode))
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := os.Chmod(p, os.FileMode(mode)); err != nil {
			return err
		}
		fmt.Fprintf(log, "write_files: %s (%o, %d bytes)\n", f.Path, mode, len(data))
	}
	var failed []string
	for _, c := range cc.RunCmd {
		fmt.Fprintf(log, "runcmd: %s\n", strings.Join(c, " "))
		cmd := v.command(c...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(log, "runcmd failed: %v\n", err)
			failed = append(failed, fmt.Sprintf("%q: %v", strings.Join(c, " "), err))
		}
	}
	if _, err := os.Stat(v.path(bootstrapSentinel)); err != nil {
		return fmt.Errorf("the bootstrap did not succeed (no %s; failed: %v); see %s", bootstrapSentinel, failed, log.Name())
	}
	return nil
}
