package remote

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxComparisons bounds what a Comparisons remembers (about 48 bytes an object, and
// the objects of deleted planes are only forgotten this way): past it, it forgets
// everything and compares afresh. 65,536 objects are about 6,000 planes' worth.
const maxComparisons = 1 << 16

// Comparisons remembers, for the objects of one cluster, which version of each was last
// found to hold what the operator wants, so a steady reconcile does not compare it
// again: a resourceVersion of an object names one content of it (and uid one object),
// and the wanted object's JSON names one want. Comparing costs two JSON round trips of
// both objects; at 500 planes the management side's comparisons were a third of what
// the manager allocates at rest. Anything else (a new version, a changed want, a
// missing or deleting object, a mismatch) compares in full. The zero value is ready; a
// nil one remembers nothing. It must not be shared between clusters: resourceVersions
// are one cluster's.
type Comparisons struct {
	mu sync.Mutex
	// matched is, by object (gvk, namespace, name), the digest of the live version and
	// want last found to match.
	matched map[uint64][sha256.Size]byte
	// full counts the comparisons made in full.
	full int
}

// compare reads obj's live object through c and reports whether it holds what obj
// wants (Matches, with exact), and the live object (nil when missing).
func (m *Comparisons) compare(ctx context.Context, c client.Reader, obj client.Object, exact []string) (client.Object, bool, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" || gvk.Version == "" {
		return nil, false, fmt.Errorf("%T %s has no apiVersion/kind", obj, obj.GetName())
	}
	key := client.ObjectKeyFromObject(obj)
	live, err := getLive(ctx, c, gvk, key)
	if err != nil || live == nil || live.GetDeletionTimestamp() != nil {
		return live, false, err
	}
	var slot uint64
	var digest [sha256.Size]byte
	if live.GetResourceVersion() == "" {
		m = nil // no version to remember it by
	}
	if m != nil {
		want, err := json.Marshal(obj)
		if err != nil {
			return live, false, err
		}
		slot, digest = comparisonDigest(gvk.String(), key, live, exact, want)
		m.mu.Lock()
		seen, ok := m.matched[slot]
		m.mu.Unlock()
		if ok && seen == digest {
			return live, true, nil
		}
	}
	u, err := toApplyObject(obj)
	if err != nil {
		return live, false, err
	}
	liveMap, err := normalized(live)
	if err != nil {
		return live, false, err
	}
	wantMap, err := normalized(u.Object)
	if err != nil {
		return live, false, err
	}
	matched := Matches(liveMap, wantMap, exact...)
	if m != nil {
		m.mu.Lock()
		m.full++
		if m.matched == nil || len(m.matched) >= maxComparisons {
			m.matched = make(map[uint64][sha256.Size]byte)
		}
		if matched {
			m.matched[slot] = digest
		} else {
			delete(m.matched, slot)
		}
		m.mu.Unlock()
	}
	return live, matched, nil
}

// comparisonDigest is the object's slot (two objects sharing one only forget each
// other) and the digest of everything the comparison's answer depends on.
func comparisonDigest(gvk string, key client.ObjectKey, live client.Object, exact []string, want []byte) (uint64, [sha256.Size]byte) {
	h := fnv.New64a()
	d := sha256.New()
	for _, s := range []string{gvk, key.Namespace, key.Name} {
		h.Write([]byte(s))
		h.Write([]byte{0})
		d.Write([]byte(s))
		d.Write([]byte{0})
	}
	d.Write([]byte{byte(len(exact))})
	for _, s := range append([]string{string(live.GetUID()), live.GetResourceVersion()}, exact...) {
		d.Write([]byte(s))
		d.Write([]byte{0})
	}
	d.Write(want)
	var digest [sha256.Size]byte
	d.Sum(digest[:0])
	return h.Sum64(), digest
}
