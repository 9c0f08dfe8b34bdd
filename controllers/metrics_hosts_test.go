package controllers

import (
	"context"
	"fmt"
	"testing"
)

type recordedHosts []string

func (r *recordedHosts) Increment(_ context.Context, code, method, host string) {
	*r = append(*r, fmt.Sprintf("%s %s %s", code, method, host))
}

func TestPlaneRequestsCountedTogether(t *testing.T) {
	for _, c := range []struct{ mgmt, host, want string }{
		{"https://10.0.0.1:6443", "10.0.0.1:6443", "200 GET 10.0.0.1:6443"},
		{"https://10.0.0.1:6443", "10.96.0.7:443", "200 GET computeplanes"},
		{"https://10.0.0.1:6443", "tenant-a.example:6443", "200 GET computeplanes"},
		{"10.0.0.1:6443", "10.0.0.1:6443", "200 GET 10.0.0.1:6443"},
		{"https://kubernetes.default.svc", "kubernetes.default.svc", "200 GET kubernetes.default.svc"},
		{"https://10.0.0.1:6443", "none", "200 GET none"},
	} {
		var got recordedHosts
		planesTogether{next: &got, mgmt: hostOf(c.mgmt)}.Increment(context.Background(), "200", "GET", c.host)
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("management %q, request to %q: counted as %v, want %q", c.mgmt, c.host, got, c.want)
		}
	}
}
