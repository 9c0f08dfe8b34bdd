package vm

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestBusyboxImageLayer: the layer has the shell, its applets and a /tmp anyone may
// write (a pod that runs as nobody writes there: without it, it crash-loops).
func TestBusyboxImageLayer(t *testing.T) {
	imgs, err := BusyboxImages()
	if err != nil {
		t.Skip(err)
	}
	layer, err := imgs[1].layer()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*tar.Header{}
	r := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	if h := got["tmp/"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory of mode 1777", h)
	}
	if h := got["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("/bin/sh: %+v, want a link to busybox", h)
	}
	if h := got["bin/busybox"]; h == nil || h.Mode != 0o755 || h.Size == 0 {
		t.Errorf("/bin/busybox: %+v", h)
	}
}
