package computeplane

import (
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// secretVersions reads each Secret the operator depends on once per version. The
// operator may read Secrets only in the namespaces where it bound itself
// (secret_access.go), so it cannot watch them cluster-wide: after its first read of a
// Secret there, it watches that namespace's Secrets of the same kind (selected by
// Kamaji's admin kubeconfig label, or by the operator's own), their metadata only, and
// reads the content again when the version the watch reports is not the one it read.
// A change also wakes the plane at once: Kamaji renewing the admin kubeconfig, someone
// editing or removing the applier Secret.
//
// A watch that failed is not trusted until it has listed again; a Secret it does not
// see (no such label) is read every time. The list and watch rights come with the
// operator's Secret binding in the namespace (config/rbac/secrets_role.yaml).
type secretVersions struct {
	meta metadata.Interface

	mu      sync.Mutex
	ctx     context.Context
	queues  []workqueue.TypedRateLimitingInterface[reconcile.Request]
	watches map[secretWatchKey]*secretWatch
	// read is each Secret as last read or written, with the plane it was read for.
	read map[client.ObjectKey]readSecret
}

type secretWatchKey struct{ namespace, selector string }

type readSecret struct {
	secret *corev1.Secret
	plane  client.ObjectKey
}

// secretWatch follows the versions of one namespace's Secrets of one selector: a bare
// reflector into a store that keeps each Secret's UID and resourceVersion, nothing else
// (an informer would add a queue, an index and their goroutines, for nothing read).
type secretWatch struct {
	cancel context.CancelFunc
	planes map[client.ObjectKey]struct{}
	// changed is called when a Secret is added, deleted or changes version (not for the
	// first list).
	changed func()

	mu sync.Mutex
	// trusted: listed, and no failure since (a failed watch lists again, through
	// Replace, before its events resume).
	trusted bool
	listed  bool
	seen    map[string]secretVersion
}

type secretVersion struct {
	uid             types.UID
	resourceVersion string
}

var secretsResource = corev1.SchemeGroupVersion.WithResource("secrets")

// secretWatchSelector is the selector of the watch that follows a Secret like this one,
// or "" when no watch would see it.
func secretWatchSelector(s *corev1.Secret) string {
	switch {
	case s.Labels[cpv1.KamajiComponentLabel] == cpv1.KamajiAdminKubeconfigComponent:
		return labels.SelectorFromSet(labels.Set{cpv1.KamajiComponentLabel: cpv1.KamajiAdminKubeconfigComponent}).String()
	case s.Labels[cpv1.ManagedByLabel] == cpv1.ManagedByValue:
		return labels.SelectorFromSet(labels.Set{cpv1.ManagedByLabel: cpv1.ManagedByValue}).String()
	}
	return ""
}

// Source wakes a plane when a Secret it depends on changes.
func (v *secretVersions) Source() source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.ctx == nil {
			v.ctx = ctx
		}
		v.queues = append(v.queues, q)
		return nil
	})
}

// recall fills out with the Secret as last read when the watch of its namespace
// reports the same version, and says whether it did.
func (v *secretVersions) recall(key client.ObjectKey, out *corev1.Secret) bool {
	if v == nil {
		return false
	}
	v.mu.Lock()
	r, ok := v.read[key]
	var w *secretWatch
	if ok {
		w = v.watches[secretWatchKey{key.Namespace, secretWatchSelector(r.secret)}]
	}
	v.mu.Unlock()
	if w == nil {
		return false
	}
	w.mu.Lock()
	seen, ok := w.seen[key.Name]
	trusted := w.trusted
	w.mu.Unlock()
	if !trusted || !ok || seen.uid != r.secret.UID || seen.resourceVersion != r.secret.ResourceVersion {
		return false
	}
	r.secret.DeepCopyInto(out)
	return true
}

// remember keeps the Secret as read (or written) for plane, and makes sure its
// namespace's watch runs.
func (v *secretVersions) remember(plane client.ObjectKey, s *corev1.Secret) {
	if v == nil || s.ResourceVersion == "" {
		return
	}
	key := client.ObjectKeyFromObject(s)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.read == nil {
		v.read = map[client.ObjectKey]readSecret{}
		v.watches = map[secretWatchKey]*secretWatch{}
	}
	v.read[key] = readSecret{secret: s.DeepCopy(), plane: plane}
	selector := secretWatchSelector(s)
	if selector == "" || v.ctx == nil || v.meta == nil {
		return
	}
	wk := secretWatchKey{key.Namespace, selector}
	w := v.watches[wk]
	if w == nil {
		w = v.start(wk)
		v.watches[wk] = w
	}
	w.planes[plane] = struct{}{}
}

// drop forgets one Secret (deleted by the operator).
func (v *secretVersions) drop(key client.ObjectKey) {
	if v == nil {
		return
	}
	v.mu.Lock()
	delete(v.read, key)
	v.mu.Unlock()
}

// forget drops what was read for plane and stops the watches no other plane uses.
func (v *secretVersions) forget(plane client.ObjectKey) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, r := range v.read {
		if r.plane == plane {
			delete(v.read, k)
		}
	}
	for k, w := range v.watches {
		delete(w.planes, plane)
		if len(w.planes) == 0 {
			w.cancel()
			delete(v.watches, k)
		}
	}
}

// remembers says whether anything of plane is held.
func (v *secretVersions) remembers(plane client.ObjectKey) bool {
	if v == nil {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, r := range v.read {
		if r.plane == plane {
			return true
		}
	}
	for _, w := range v.watches {
		if _, ok := w.planes[plane]; ok {
			return true
		}
	}
	return false
}

// start runs a metadata watch of one namespace's Secrets with one selector. Called with
// v.mu held.
func (v *secretVersions) start(k secretWatchKey) *secretWatch {
	ctx, cancel := context.WithCancel(v.ctx)
	res := v.meta.Resource(secretsResource).Namespace(k.namespace)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = k.selector
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = k.selector
			return res.Watch(ctx, o)
		},
	}
	w := &secretWatch{cancel: cancel, planes: map[client.ObjectKey]struct{}{}, seen: map[string]secretVersion{}}
	w.changed = func() { v.wake(w) }
	reflector := toolscache.NewReflectorWithOptions(lw, &metav1.PartialObjectMetadata{}, w,
		toolscache.ReflectorOptions{Name: "secrets in " + k.namespace, TypeDescription: "Secret metadata"})
	log := ctrl.LoggerFrom(ctx).WithValues("namespace", k.namespace, "selector", k.selector)
	go wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		if err := reflector.ListAndWatchWithContext(ctx); err != nil && ctx.Err() == nil {
			w.mu.Lock()
			w.trusted = false
			w.mu.Unlock()
			log.V(1).Info("watch of Secrets failed; reading them until it lists again", "error", err.Error())
		}
	}, time.Second, 1.0, true)
	return w
}

// The reflector's store (toolscache.ReflectorStore).

func (w *secretWatch) Add(obj any) error    { w.set(obj); return nil }
func (w *secretWatch) Update(obj any) error { w.set(obj); return nil }
func (w *secretWatch) Resync() error        { return nil }

func (w *secretWatch) Delete(obj any) error {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil
	}
	w.mu.Lock()
	_, had := w.seen[m.Name]
	delete(w.seen, m.Name)
	w.mu.Unlock()
	if had {
		w.changed()
	}
	return nil
}

// Replace is a list: the whole namespace's state, trusted from now on.
func (w *secretWatch) Replace(list []any, _ string) error {
	seen := make(map[string]secretVersion, len(list))
	for _, obj := range list {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			seen[m.Name] = secretVersion{uid: m.UID, resourceVersion: m.ResourceVersion}
		}
	}
	w.mu.Lock()
	changed := w.listed && !maps.Equal(w.seen, seen)
	w.seen, w.listed, w.trusted = seen, true, true
	w.mu.Unlock()
	if changed {
		w.changed()
	}
	return nil
}

// set records obj's version, and says when it is new.
func (w *secretWatch) set(obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	now := secretVersion{uid: m.UID, resourceVersion: m.ResourceVersion}
	w.mu.Lock()
	before, had := w.seen[m.Name]
	w.seen[m.Name] = now
	w.mu.Unlock()
	if !had || before != now {
		w.changed()
	}
}

// wake queues every plane that depends on the watch.
func (v *secretVersions) wake(w *secretWatch) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for plane := range w.planes {
		for _, q := range v.queues {
			q.Add(reconcile.Request{NamespacedName: plane})
		}
	}
}
