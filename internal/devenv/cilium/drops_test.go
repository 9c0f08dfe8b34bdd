package cilium

import (
	"bufio"
	"strings"
	"testing"
)

func TestDropCount(t *testing.T) {
	metrics := `# HELP cilium_drop_count_total Total dropped packets
# TYPE cilium_drop_count_total counter
cilium_drop_count_total{direction="EGRESS",reason="Policy denied"} 3
cilium_drop_count_total{direction="INGRESS",reason="Policy denied"} 5
cilium_drop_count_total{direction="EGRESS",reason="Policy denied by denylist"} 2
cilium_drop_count_total{direction="EGRESS",reason="Stale or unroutable IP"} 7
cilium_drop_bytes_total{direction="EGRESS",reason="Policy denied"} 180
`
	for _, tc := range []struct {
		reason, direction string
		want              float64
	}{
		{DropPolicyDenied, "EGRESS", 3},
		{DropPolicyDenied, "INGRESS", 5},
		{DropDenylist, "EGRESS", 2},
		{DropDenylist, "INGRESS", 0},
		{"Stale or unroutable IP", "EGRESS", 7},
	} {
		got, err := dropCount(bufio.NewScanner(strings.NewReader(metrics)), tc.reason, tc.direction)
		if err != nil || got != tc.want {
			t.Errorf("dropCount(%q, %s) = %v, %v; want %v", tc.reason, tc.direction, got, err, tc.want)
		}
	}
	if _, err := dropCount(bufio.NewScanner(strings.NewReader(`cilium_drop_count_total{direction="EGRESS",reason="Policy denied"} x`+"\n")), DropPolicyDenied, "EGRESS"); err == nil {
		t.Error("a sample that is not a number was read as one")
	}
}
