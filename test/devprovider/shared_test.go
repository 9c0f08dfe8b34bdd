package devprovider

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
)

// TestReplacingReaderAcrossReads: a string to replace split between two reads of the
// stream is still replaced, and nothing else is held back.
func TestReplacingReaderAcrossReads(t *testing.T) {
	r := newReplacer("fleet-0001", "fleet-0002", "uid-aaaa", "uid-bbbb")
	in := []byte(`{"ns":"fleet-0001","uid":"uid-aaaa"}` + "\n" + `{"ns":"fleet-0001x"}` + "\n" + "tail fleet-00")
	want := []byte(`{"ns":"fleet-0002","uid":"uid-bbbb"}` + "\n" + `{"ns":"fleet-0002x"}` + "\n" + "tail fleet-00")
	for size := 1; size < len(in); size++ {
		rr := &replacingReader{src: io.NopCloser(iotest.OneByteReader(bytes.NewReader(in))), r: r}
		if size > 1 {
			rr.src = io.NopCloser(&chunked{data: in, size: size})
		}
		got, err := io.ReadAll(rr)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("chunks of %d: %q, %v", size, got, err)
		}
	}
	// A complete JSON frame is delivered without waiting for more data.
	pr, pw := io.Pipe()
	rr := &replacingReader{src: pr, r: r}
	go func() { _, _ = pw.Write([]byte(`{"ns":"fleet-0001"}` + "\n")) }()
	buf := make([]byte, 64)
	n, err := rr.Read(buf)
	if err != nil || string(buf[:n]) != `{"ns":"fleet-0002"}`+"\n" {
		t.Fatalf("first frame: %q, %v", buf[:n], err)
	}
	_ = pw.Close()
}

type chunked struct {
	data []byte
	size int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.data)
	c.data = c.data[n:]
	return n, nil
}

func TestWithoutProtobuf(t *testing.T) {
	for in, want := range map[string]string{
		"application/vnd.kubernetes.protobuf, application/json": "application/json",
		"application/vnd.kubernetes.protobuf":                   "application/json",
		"":                                                      "application/json",
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
	} {
		if got := withoutProtobuf(in); got != want {
			t.Errorf("withoutProtobuf(%q) = %q, want %q", in, got, want)
		}
	}
}
