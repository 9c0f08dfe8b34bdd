package cilium

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/cozystack/computeplane/internal/devenv/netns"
)

// Reach connects to addr from inside the named network namespace and reads the first line
// the far end sends (none, for a server that waits for its client: the connection is the
// answer). A dropped SYN is a timeout after 2 s.
func Reach(ctx context.Context, in, addr string) (string, error) {
	c, err := netns.Dial(ctx, in, "tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), nil
}

// CheckRefused checks that addr cannot be reached from inside the namespace in because
// the agent dropped the packets for reason: the connection times out (a far end that
// refuses answers at once, a policy drop never does), and the agent counts at least one
// more egress drop of that reason (within 10 s: its metrics are read from the datapath's
// map). It returns the count before and after.
func (n *Node) CheckRefused(ctx context.Context, in, addr, reason string) (before, after float64, err error) {
	if before, err = n.Drops(ctx, reason, "EGRESS"); err != nil {
		return 0, 0, err
	}
	got, err := Reach(ctx, in, addr)
	var ne net.Error
	switch {
	case err == nil:
		return before, before, fmt.Errorf("%s is reachable (it answered %q)", addr, got)
	case !errors.As(err, &ne) || !ne.Timeout():
		return before, before, fmt.Errorf("%s is refused, but not by a dropped packet: %w", addr, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if after, err = n.Drops(ctx, reason, "EGRESS"); err != nil {
			return before, 0, err
		}
		if after > before {
			return before, after, nil
		}
		if time.Now().After(deadline) {
			return before, after, fmt.Errorf("%s timed out, but the agent counted no %q drop (%v before, %v after)", addr, reason, before, after)
		}
		select {
		case <-ctx.Done():
			return before, after, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
