package cilium

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Drop reasons the agent counts (pkg/monitor/api/drop.go): a packet no allow rule
// admits, and one a deny rule refuses.
const (
	DropPolicyDenied = "Policy denied"
	DropDenylist     = "Policy denied by denylist"
)

// Drops reads the agent's count of packets dropped for reason in direction ("EGRESS",
// "INGRESS"), from its metrics (cilium_drop_count_total): what says a packet that did not
// arrive was refused by policy, not lost for another reason.
func (n *Node) Drops(ctx context.Context, reason, direction string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(NodeIP, strconv.Itoa(metricsPort)) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return dropCount(bufio.NewScanner(resp.Body), reason, direction)
}

// dropCount sums cilium_drop_count_total's samples for reason and direction.
func dropCount(s *bufio.Scanner, reason, direction string) (float64, error) {
	var sum float64
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "cilium_drop_count_total{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "cilium_drop_count_total{"), "} ")
		if !ok || !strings.Contains(labels, `reason="`+reason+`"`) || !strings.Contains(labels, `direction="`+direction+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return 0, fmt.Errorf("cilium_drop_count_total: %q: %w", line, err)
		}
		sum += v
	}
	return sum, s.Err()
}
