package ssa

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
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
// both objects, which a fleet at rest would otherwise pay on every pass. Anything else (a new version, a changed want, a
// missing or deleting object, a mismatch) compares in full. The zero value is ready; a
// nil one remembers nothing. It must not be shared between clusters: resourceVersions
// are one cluster's.
type Comparisons struct {
	// Fresh, when set, is where a comparison of a kind in Trimmed reads the object in
	// full once it finds a version it does not remember: the reader it is given (the
	// manager's cache) holds those kinds without their content, their identity only,
	// which is all a remembered comparison needs. Both are set before first use.
	Fresh   client.Reader
	Trimmed map[schema.GroupVersionKind]bool

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
	var fresh client.Reader
	if m != nil && m.Trimmed[gvk] {
		fresh = m.Fresh
		if fresh == nil {
			return live, false, fmt.Errorf("%s %s is read without its content and there is nowhere to read it in full", gvk.Kind, key)
		}
	}
	var slot uint64
	var digest [sha256.Size]byte
	var want []byte
	if live.GetResourceVersion() == "" {
		m = nil // no version to remember it by
	}
	if m != nil {
		if want, err = json.Marshal(obj); err != nil {
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
	if fresh != nil {
		// A version not remembered: compare what the API server holds, and remember it
		// by that version (the cache may trail it for a moment; until it catches up, a
		// pass reads in full again).
		if live, err = getLive(ctx, fresh, gvk, key); err != nil || live == nil || live.GetDeletionTimestamp() != nil {
			return live, false, err
		}
		if m != nil {
			slot, digest = comparisonDigest(gvk.String(), key, live, exact, want)
		}
	}
	u, err := ApplyObject(obj)
	if err != nil {
		return live, false, err
	}
	liveMap, err := Normalized(live)
	if err != nil {
		return live, false, err
	}
	wantMap, err := Normalized(u.Object)
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
