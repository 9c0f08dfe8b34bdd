package computeplane

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestOwnWritesBehind(t *testing.T) {
	key := client.ObjectKey{Namespace: "t", Name: "p"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var w planeStates
	if w.behind(key, "10", t0) {
		t.Fatal("behind with no write")
	}
	if _, ok := w.states[key]; ok {
		t.Fatal("a read made state")
	}
	w.wrote(key, "10", t0)
	if !w.behind(key, "10", t0.Add(time.Millisecond)) {
		t.Error("the cache still shows the version the write replaced, yet it is not behind")
	}
	if w.behind(key, "11", t0.Add(2*time.Millisecond)) {
		t.Error("the cache shows a newer version, yet it is behind")
	}
	if w.behind(key, "10", t0.Add(3*time.Millisecond)) {
		t.Error("the write was forgotten once seen; an old version again is someone else's business")
	}
	w.wrote(key, "12", t0)
	if w.behind(key, "12", t0.Add(maxCacheLag)) {
		t.Error("waited past maxCacheLag")
	}
	w.wrote(key, "13", t0)
	w.forget(key)
	if w.behind(key, "13", t0) {
		t.Error("behind after forget")
	}
}
