package vm

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"
)

// Image is a container image the VM's disk comes with (a node image preloads the images
// its kubelet needs, and there is no registry here): files by path in one layer, and the
// command it runs.
type Image struct {
	// Name is the reference pods use, e.g. localhost/computeplane/busybox:1.
	Name string
	// Dirs are directories to create, by path, with their modes.
	Dirs map[string]int64
	// Files maps an absolute path to its content; Links maps a path to a symlink target.
	Files      map[string]FileContent
	Links      map[string]string
	Entrypoint []string
}

// FileContent is one file of an image.
type FileContent struct {
	Data []byte
	Mode int64
}

// BusyboxImages are the images every VM here has: a sandbox ("pause") image and a
// general one with a shell and nc, both Debian's busybox-static (its wget crashes on
// this machine; nc works).
func BusyboxImages() ([]Image, error) {
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("the VM images are made of Debian's busybox-static (apt-get install busybox-static): %w", err)
	}
	// An image has no libc: Debian's dynamically linked busybox package would not run there.
	if f, err := elf.NewFile(bytes.NewReader(bin)); err != nil || f.Section(".interp") != nil {
		return nil, errors.New("/bin/busybox is not a static binary: the VM images need Debian's busybox-static (apt-get install busybox-static)")
	}
	files := map[string]FileContent{"/bin/busybox": {Data: bin, Mode: 0o755}}
	links := map[string]string{}
	for _, applet := range []string{"sh", "sleep", "nc", "cat", "echo", "ls", "hostname", "id", "nslookup", "ip", "ping", "true", "false", "env", "timeout", "httpd", "mkdir", "touch", "test"} {
		links["/bin/"+applet] = "busybox"
	}
	// A scratch /tmp anyone may write, as a base image has (a pod that runs as nobody
	// writes there).
	dirs := map[string]int64{"/tmp": 0o1777}
	return []Image{
		{Name: SandboxImage, Files: files, Links: links, Dirs: dirs, Entrypoint: []string{"/bin/sleep", "2147483647"}},
		{Name: BusyboxImage, Files: files, Links: links, Dirs: dirs, Entrypoint: []string{"/bin/sh"}},
	}, nil
}

// The images BusyboxImages makes.
const (
	SandboxImage = "localhost/computeplane/pause:1"
	BusyboxImage = "localhost/computeplane/busybox:1"
)

// OCIArchive is the image as an OCI image layout in a tar, as `ctr images import` takes
// it, named by the io.containerd.image.name annotation.
func (img Image) OCIArchive() ([]byte, error) {
	layer, err := img.layer()
	if err != nil {
		return nil, err
	}
	layerDigest := digest(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": img.Entrypoint, "Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": descriptor("application/vnd.oci.image.config.v1+json", config, nil),
		"layers": []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer, nil)},
	})
	if err != nil {
		return nil, err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []any{descriptor("application/vnd.oci.image.manifest.v1+json", manifest,
			map[string]string{"io.containerd.image.name": img.Name})},
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
		{blobPath(layer), layer},
	} {
		if err := add(f.name, f.data); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), tw.Close()
}

func (img Image) layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	paths := make([]string, 0, len(img.Files)+len(img.Links))
	for p := range img.Files {
		paths = append(paths, p)
	}
	for p := range img.Links {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]bool{}
	own := make([]string, 0, len(img.Dirs))
	for d := range img.Dirs {
		own = append(own, d)
	}
	sort.Strings(own)
	for _, d := range own {
		dirs[d] = true
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: img.Dirs[d], ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
	}
	for _, p := range paths {
		for d := dirOf(p); d != "" && !dirs[d]; d = dirOf(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				return nil, err
			}
		}
		if target, ok := img.Links[p]; ok {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p[1:], Linkname: target, Mode: 0o777, ModTime: time.Unix(0, 0)}); err != nil {
				return nil, err
			}
			continue
		}
		f := img.Files[p]
		if err := tw.WriteHeader(&tar.Header{Name: p[1:], Mode: f.Mode, Size: int64(len(f.Data)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), tw.Close()
}

// dirOf is p's parent directory, "" for a top-level entry.
func dirOf(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return ""
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(b []byte) string {
	sum := sha256.Sum256(b)
	return "blobs/sha256/" + hex.EncodeToString(sum[:])
}

func descriptor(mediaType string, b []byte, annotations map[string]string) map[string]any {
	d := map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
	if annotations != nil {
		d["annotations"] = annotations
	}
	return d
}
