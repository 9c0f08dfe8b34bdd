package operatortest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// memoryCgroup is a memory cgroup of its own for the manager, with a limit: what a
// container's memory limit does to it. Its usage counts the process's anonymous memory
// and the file pages it brought in (the binary's, read from disk again after evict), so
// the kernel reclaims those pages under the limit, and kills the process when its
// anonymous memory alone no longer fits.
type memoryCgroup struct {
	dir string
	v2  bool
}

// newMemoryCgroup makes a cgroup under the test's own memory cgroup (cgroup v1's memory
// controller, or v2 where the test's cgroup delegates it), limited to limit bytes.
func newMemoryCgroup(limit int64) (*memoryCgroup, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("computeplane-manager-%d", os.Getpid())
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var cg *memoryCgroup
		switch {
		case f[0] != "0" && contains(strings.Split(f[1], ","), "memory"):
			cg = &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", f[2], name)}
		case f[0] == "0" && f[1] == "":
			controllers, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", f[2], "cgroup.subtree_control"))
			if err != nil || !contains(strings.Fields(string(controllers)), "memory") {
				continue
			}
			cg = &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup", f[2], name), v2: true}
		default:
			continue
		}
		if err := os.MkdirAll(cg.dir, 0o755); err != nil {
			return nil, err
		}
		file, value := "memory.limit_in_bytes", strconv.FormatInt(limit, 10)
		if cg.v2 {
			file = "memory.max"
		}
		if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(value), 0o644); err != nil {
			_ = os.Remove(cg.dir)
			return nil, err
		}
		return cg, nil
	}
	return nil, errors.New("no memory cgroup to make one under (cgroup v1's memory controller, or v2 delegating memory)")
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// command runs argv in the cgroup: a shell moves itself in, then execs.
func (cg *memoryCgroup) command(argv []string) []string {
	return append([]string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(cg.dir, "cgroup.procs")}, argv...)
}

// MemoryCgroupStats are the manager's cgroup's counters, in bytes (counts for the
// events).
type MemoryCgroupStats struct {
	Usage, MaxUsage, Anon, File, MappedFile int64
	// FileRefaults counts file pages read again after being reclaimed.
	FileRefaults int64
	// OOMKills counts processes the kernel killed at the limit.
	OOMKills int64
}

func (cg *memoryCgroup) stats() (MemoryCgroupStats, error) {
	var s MemoryCgroupStats
	read := func(file string) (map[string]int64, error) {
		data, err := os.ReadFile(filepath.Join(cg.dir, file))
		if err != nil {
			return nil, err
		}
		out := map[string]int64{}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				out[f[0]], _ = strconv.ParseInt(f[1], 10, 64)
			} else if len(f) == 1 {
				out[""], _ = strconv.ParseInt(f[0], 10, 64)
			}
		}
		return out, nil
	}
	stat, err := read("memory.stat")
	if err != nil {
		return s, err
	}
	if cg.v2 {
		cur, err := read("memory.current")
		if err != nil {
			return s, err
		}
		peak, _ := read("memory.peak")
		events, err := read("memory.events")
		if err != nil {
			return s, err
		}
		s = MemoryCgroupStats{Usage: cur[""], MaxUsage: peak[""], Anon: stat["anon"], File: stat["file"], MappedFile: stat["file_mapped"],
			FileRefaults: stat["workingset_refault_file"], OOMKills: events["oom_kill"]}
		return s, nil
	}
	usage, err := read("memory.usage_in_bytes")
	if err != nil {
		return s, err
	}
	maxUsage, err := read("memory.max_usage_in_bytes")
	if err != nil {
		return s, err
	}
	oom, err := read("memory.oom_control")
	if err != nil {
		return s, err
	}
	return MemoryCgroupStats{Usage: usage[""], MaxUsage: maxUsage[""], Anon: stat["rss"], File: stat["cache"], MappedFile: stat["mapped_file"],
		FileRefaults: stat["workingset_refault_file"], OOMKills: oom["oom_kill"]}, nil
}

// remove deletes the cgroup (it must have no process left).
func (cg *memoryCgroup) remove() error {
	return os.Remove(cg.dir)
}

// evict drops the file's pages from the page cache, so the next process to read them
// (the manager, in its cgroup) reads them from disk, and they count against its limit
// as in a fresh container.
func evict(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
