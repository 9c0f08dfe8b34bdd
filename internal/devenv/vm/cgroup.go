package vm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupRoot is the directory of the machine's cgroup v1 (hybrid) hierarchies.
const cgroupRoot = "/sys/fs/cgroup"

// enterCgroup is a shell prefix that moves the shell into the VM's pids cgroup before it
// execs the command: every process of the VM (its containerd and the shims it forks,
// its kubelet, cloud-init's commands) and the kubelet's pod cgroups under the VM's
// cgroupRoot are then found, and killed, under one directory.
func enterCgroup(group string) string {
	return fmt.Sprintf(`mkdir -p %[1]s && echo $$ > %[1]s/cgroup.procs && exec "$0" "$@"`, filepath.Join(cgroupRoot, "pids", group, "system"))
}

// makeCgroupRoot creates the VM's cgroup in every hierarchy (the kubelet refuses a
// cgroupRoot missing from any; systemd's slice would exist on a real VM), cpuset's with
// its parent's CPUs and memory nodes (an empty cpuset takes no task).
func makeCgroupRoot(group string) error {
	hierarchies, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		if h.Name() == "unified" {
			continue
		}
		dir := filepath.Join(cgroupRoot, h.Name(), group)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if h.Name() != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(cgroupRoot, h.Name(), f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// killCgroup kills every process under the group in the pids hierarchy until none is
// left, then removes the group's directories in every hierarchy (the kubelet made its
// pod cgroups in all of them).
func killCgroup(group string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := cgroupPids(filepath.Join(cgroupRoot, "pids", group))
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of cgroup %s outlived SIGKILL for %s", pids, group, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	hierarchies, _ := os.ReadDir(cgroupRoot)
	var errs []error
	for _, h := range hierarchies {
		dir := filepath.Join(cgroupRoot, h.Name(), group)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		// Deepest first: a cgroup with children cannot be removed.
		sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
		for _, d := range dirs {
			if err := removeCgroup(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroup removes an empty cgroup, retrying while the kernel still counts its last
// processes.
func removeCgroup(dir string) error {
	var err error
	for range 40 {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", dir, err)
}

// cgroupPids lists the processes in dir and every cgroup under it.
func cgroupPids(dir string) []int {
	var out []int
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out
}
