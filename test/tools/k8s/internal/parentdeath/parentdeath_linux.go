package parentdeath

import (
	"os"
	"syscall"
)

// The process is started in its own process group (envtest does that), so a test binary
// or demo that crashes or is killed would leave it running. Ask the kernel to kill it
// when its parent goes, and go at once if the parent is already gone.
func init() {
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0)
	if errno == 0 && os.Getppid() == 1 {
		os.Exit(1)
	}
}
