package devenv

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cozystack/computeplane/internal/devenv/hostproc"
)

// Labels Kamaji v1.0.0 puts on a TenantControlPlane's Deployment
// (internal/utilities/utilities.go KamajiLabels, internal/constants/labels.go,
// internal/builders/controlplane/deployment.go Build: KamajiLabels(name, "deployment")).
const (
	kamajiProjectLabel   = "kamaji.clastix.io/project"
	kamajiNameLabel      = "kamaji.clastix.io/name"
	kamajiComponentLabel = "kamaji.clastix.io/component"
)

// The container names Kamaji gives the control plane (internal/builders/controlplane/
// deployment.go apiServerContainerName, controlPlaneContainerName, schedulerContainerName).
const (
	kamajiAPIServerContainer         = "kube-apiserver"
	kamajiControllerManagerContainer = "kube-controller-manager"
	kamajiSchedulerContainer         = "kube-scheduler"
)

// companionContainers are the containers the runner runs next to the kube-apiserver, in
// this order, when it has a binary for their image: clients of that apiserver whose flags
// and kubeconfigs it knows how to point at it (see companionArgs).
var companionContainers = []string{kamajiControllerManagerContainer, kamajiSchedulerContainer}

// PodRunner is a test-only stand-in for the kubelet and the Deployment controller, for
// the control-plane Deployments Kamaji makes: it runs each one's kube-apiserver container,
// and next to it the kube-controller-manager and kube-scheduler containers, as host
// processes and reports the Deployment's status as those two would.
//
// For each Deployment labelled by Kamaji it
//   - materialises the container's volumes (projected and plain Secrets and ConfigMaps,
//     emptyDirs) into a directory, as the kubelet mounts them: the PKI projection
//     includes <tcp>-datastore-certificate as etcd/ca.crt, etcd/server.crt,
//     etcd/server.key (deployment.go buildPKIVolume), the CA Secret is mounted at
//     /etc/ca-certificates, /etc/ssl/certs, /usr/share/ca-certificates and
//     /usr/local/share/ca-certificates (buildCAVolume and the three after it);
//   - rewrites every argument that names a path under a mount to the materialised file,
//     sets --bind-address=127.0.0.1 and a --secure-port of its own (Kamaji sets
//     networkProfile.port, 6443 for every plane), and drops --egress-selector-config-file
//     (konnectivity does not run here);
//   - runs the kube-controller-manager and kube-scheduler containers of the same pod
//     template next to that process (when Binaries has their images), as a pod's
//     containers share its network namespace: each binds 127.0.0.1 on a --secure-port of
//     its own (Kamaji sets --bind-address=0.0.0.0 and leaves the default ports, 10257 and
//     10259, which two planes on one host would both want), and the kubeconfigs Kamaji
//     gives them (<tcp>-controller-manager-kubeconfig and <tcp>-scheduler-kubeconfig,
//     mounted at /etc/kubernetes, server https://127.0.0.1:<networkProfile.port>:
//     internal/resources/kubeconfig.go localhostAsAdvertiseAddress) are rewritten to the
//     loopback port of the kube-apiserver of their own pod. The controller-manager makes
//     the plane a working control plane: each namespace's default ServiceAccount (without
//     which the ServiceAccount admission plugin refuses every pod) and kube-root-ca.crt,
//     quota usage, garbage collection, namespace deletion. Each restarts on its own when it
//     exits (restartPolicy Always), while the kube-apiserver serves on;
//   - maps each container image (registry.k8s.io/kube-apiserver:<tcp version>, ...) to a
//     local binary by the image's name, whatever its tag: every plane runs the binaries
//     test/tools/build.sh built, not the version the TenantControlPlane asks for;
//   - probes the container's readiness probe path (/readyz) over HTTPS without verifying
//     the certificate, as the kubelet does, and patches the Deployment's status:
//     observedGeneration, replicas, updatedReplicas, readyReplicas, availableReplicas,
//     unavailableReplicas. Kamaji reads generation == observedGeneration and
//     unavailableReplicas == 0 as rolled out and then reports the version Ready
//     (internal/resources/k8s_deployment_resource.go UpdateTenantControlPlaneStatus);
//   - restarts the process when it exits (with a back-off, as a container's restart
//     policy Always), and rolls out a new pod template as Kamaji's default strategy asks
//     (maxSurge 100%, maxUnavailable 0: deployment.go setStrategy): the new template's
//     process starts next to the serving one, takes its routes once ready, and the old
//     one stops. Kamaji puts hashes of the Secrets it mounts into the template's labels
//     (deployment.go templateLabels), so a certificate Kamaji renews is such a rollout;
//   - routes, through the PlaneProxy, https://<tcp>.<ns>.svc[.cluster.local]:<port> and
//     the Service's <ClusterIP>:<port> to the serving process's loopback port (each
//     process has its own, so a client's next connection after a rollout reaches the
//     new one);
//   - plays the one part of the garbage collector (which envtest lacks) that matters
//     here: a Deployment whose TenantControlPlane is gone is deleted, so its pod stops.
//
// What it does not do: one process per container stands for all spec.replicas (the
// status reports them all ready together; the controller-manager and scheduler still
// elect a leader, as their --leader-elect=true asks, which matters only while a rollout
// runs two pods); the Deployment's readiness is the kube-apiserver's readiness probe
// alone: the controller-manager's and scheduler's startup probes (/healthz) are run and
// shown by Describe, but neither gates the status, since with one process standing for
// every replica a restart of one container would make all of them unavailable at once;
// liveness probes are not run (a process is restarted when it exits, not when it stops
// answering); the konnectivity-server container does not run (no nodes, no agents), nor
// any container whose image has no binary in Binaries; no pods exist in the API;
// Kamaji's other objects outlive their TenantControlPlane.
type PodRunner struct {
	client   client.Client
	proxy    *PlaneProxy
	binaries map[string]string
	dir      string
	interval time.Duration

	mu   sync.Mutex
	pods map[types.NamespacedName]*runnerPod

	cancel   context.CancelFunc
	done     chan struct{}
	stopping sync.WaitGroup
	probe    *http.Client
}

// PodRunnerOptions shape a PodRunner.
type PodRunnerOptions struct {
	// Dir holds each pod's materialised volumes and process log.
	Dir string
	// Binaries maps an image name (its last path element, no tag) to a local binary. The
	// kube-apiserver's is required; a companion container (the controller-manager, the
	// scheduler) whose image is not in it does not run.
	Binaries map[string]string
	// Interval between two passes over the Deployments; 200 ms when zero.
	Interval time.Duration
}

// runnerPod is one Deployment's pod as the runner plays it: the instance serving, and
// during a rollout the one replacing it.
type runnerPod struct {
	key      types.NamespacedName
	tcp      string
	dir      string
	cur      *instance // serving, routed
	next     *instance // started for a new pod template, routed once ready
	seq      int
	restarts int
	nextTry  time.Time
	lastErr  error
	routed   []string
	routedTo string
}

// instance is one pod of one pod template: its kube-apiserver process and the companion
// containers run next to it.
type instance struct {
	proc       *hostproc.Process // the kube-apiserver
	port       int
	template   string
	ready      bool
	companions []*companion
	// stopping is set once the instance is being stopped: its companions are not
	// restarted any more.
	stopping atomic.Bool
}

// companion is a container of the pod other than the kube-apiserver (the controller-
// manager, the scheduler), restarted on its own when it exits, as the kubelet restarts
// one container of a pod. Its fields are guarded by the runner's mu.
type companion struct {
	name, bin, log string
	args, env      []string
	port           int
	probe          string // its startup probe's path, over HTTPS on port
	proc           *hostproc.Process
	started        bool // the startup probe passed since the process last started
	restarts       int
	nextTry        time.Time
	lastErr        error
}

func (c *companion) addr() string { return "127.0.0.1:" + strconv.Itoa(c.port) }

func (i *instance) addr() string { return "127.0.0.1:" + strconv.Itoa(i.port) }

// StartPodRunner starts the runner's loop.
func StartPodRunner(c client.Client, proxy *PlaneProxy, o PodRunnerOptions) (*PodRunner, error) {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	interval := o.Interval
	if interval == 0 {
		interval = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &PodRunner{
		client: c, proxy: proxy, binaries: o.Binaries, dir: o.Dir, interval: interval,
		pods: map[types.NamespacedName]*runnerPod{}, cancel: cancel, done: make(chan struct{}),
		// The kubelet's HTTPS probes do not verify the server's certificate.
		probe: &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}, //nolint:gosec // as the kubelet probes
	}
	go r.loop(ctx)
	return r, nil
}

// Stop ends the loop and every process it runs.
func (r *PodRunner) Stop() {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, p := range r.pods {
		r.remove(p)
		delete(r.pods, key)
	}
	r.probe.CloseIdleConnections()
	r.stopping.Wait()
}

// remove unroutes a pod at once and stops its processes in the background (a kube-apiserver
// may take seconds to drain); r.mu is held.
func (r *PodRunner) remove(p *runnerPod) {
	for _, i := range []*instance{p.cur, p.next} {
		if i != nil {
			r.proxy.Unroute(i.addr())
			r.stopLater(i)
		}
	}
	p.cur, p.next = nil, nil
}

// stopLater stops an instance in the background, as the kubelet ends a pod (SIGTERM to
// every container, then SIGKILL after the grace period); Stop waits for every one. Only
// the loop (or Stop, once the loop has ended) calls it, with or without r.mu, and only the
// loop starts a companion's process: reading them here races with nothing, and none is
// restarted after it.
func (r *PodRunner) stopLater(i *instance) {
	i.stopping.Store(true)
	procs := []*hostproc.Process{i.proc}
	for _, c := range i.companions {
		procs = append(procs, c.proc)
	}
	for _, proc := range procs {
		r.stopping.Add(1)
		go func() {
			defer r.stopping.Done()
			proc.Stop(30 * time.Second)
		}()
	}
}

// APIServer is the loopback address where the Deployment namespace/name's kube-apiserver
// serves (the instance the proxy routes to), once the runner has started it.
func (r *PodRunner) APIServer(namespace, name string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[types.NamespacedName{Namespace: namespace, Name: name}]
	if !ok || p.cur == nil {
		return "", false
	}
	return p.cur.addr(), true
}

// Kill SIGKILLs the Deployment's serving kube-apiserver (a crashed container); the runner
// reports it unavailable and restarts it after its back-off.
func (r *PodRunner) Kill(namespace, name string) error {
	r.mu.Lock()
	p, ok := r.pods[types.NamespacedName{Namespace: namespace, Name: name}]
	var cur *instance
	if ok {
		cur = p.cur
	}
	r.mu.Unlock()
	if cur == nil {
		return fmt.Errorf("no kube-apiserver runs for Deployment %s/%s", namespace, name)
	}
	cur.proc.Kill()
	return nil
}

// Describe says what the runner knows of a Deployment, for failure messages.
func (r *PodRunner) Describe(namespace, name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[types.NamespacedName{Namespace: namespace, Name: name}]
	if !ok {
		return fmt.Sprintf("the pod runner has not seen Deployment %s/%s", namespace, name)
	}
	s := fmt.Sprintf("Deployment %s/%s: restarts %d, last error %v, routes %v -> %s",
		namespace, name, p.restarts, p.lastErr, p.routed, p.routedTo)
	for what, i := range map[string]*instance{"serving": p.cur, "rolling out": p.next} {
		if i != nil {
			s += fmt.Sprintf("\n%s: %s template %s ready %t; log ends:\n%s", what, i.addr(), i.template, i.ready, i.proc.Tail(10))
			for _, c := range i.companions {
				s += fmt.Sprintf("\n  %s at %s: started %t, restarts %d, last error %v", c.name, c.addr(), c.started, c.restarts, c.lastErr)
				if c.proc != nil {
					s += "; log ends:\n" + c.proc.Tail(5)
				}
			}
		}
	}
	return s
}

func (r *PodRunner) loop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		r.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *PodRunner) pass(ctx context.Context) {
	var list appsv1.DeploymentList
	if err := r.client.List(ctx, &list, client.MatchingLabels{kamajiProjectLabel: "kamaji", kamajiComponentLabel: "deployment"}); err != nil {
		return
	}
	seen := map[types.NamespacedName]bool{}
	for i := range list.Items {
		d := &list.Items[i]
		key := types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
		if d.DeletionTimestamp != nil {
			continue
		}
		if r.collect(ctx, d) {
			continue
		}
		seen[key] = true
		r.syncOne(ctx, d)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, p := range r.pods {
		if !seen[key] {
			r.remove(p)
			delete(r.pods, key)
		}
	}
}

// collect plays the garbage collector (which envtest does not run) for a Deployment whose
// controlling TenantControlPlane is gone (Kamaji sets it: k8s_deployment_resource.go,
// SetControllerReference): it deletes the Deployment, and the pass stops its pod.
// Kamaji's other objects (Secrets, Service, ConfigMaps) stay, as everything else in envtest.
func (r *PodRunner) collect(ctx context.Context, d *appsv1.Deployment) bool {
	owner := metav1.GetControllerOf(d)
	if owner == nil || owner.Kind != "TenantControlPlane" {
		return false
	}
	tcp := &metav1.PartialObjectMetadata{}
	tcp.SetGroupVersionKind(schema.FromAPIVersionAndKind(owner.APIVersion, owner.Kind))
	err := r.client.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: owner.Name}, tcp)
	switch {
	case err == nil && tcp.UID == owner.UID:
		return false
	case err != nil && !apierrors.IsNotFound(err):
		return false
	}
	_ = r.client.Delete(ctx, d, client.Preconditions{UID: &d.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return true
}

func (r *PodRunner) syncOne(ctx context.Context, d *appsv1.Deployment) {
	key := types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
	template := templateHash(d)
	r.mu.Lock()
	p, ok := r.pods[key]
	if !ok {
		p = &runnerPod{key: key, tcp: d.Labels[kamajiNameLabel], dir: filepath.Join(r.dir, d.Namespace+"_"+d.Name)}
		r.pods[key] = p
	}
	startCur, startNext := r.reap(p, template)
	due := time.Now().After(p.nextTry)
	r.mu.Unlock()

	if (startCur || startNext) && due {
		i, err := r.start(ctx, d, p, template)
		r.mu.Lock()
		p.lastErr = err
		switch {
		case err != nil:
			// Volumes not there yet (the kubelet waits in ContainerCreating), or worse.
			p.nextTry = time.Now().Add(time.Second)
		case startCur:
			p.cur = i
		default:
			p.next = i
		}
		r.mu.Unlock()
	}

	cur, next := r.probeAndPromote(d, p)
	r.tend(d, cur)
	r.tend(d, next)
	r.route(ctx, d, p, cur)
	if err := r.reportStatus(ctx, d, template, cur, next); err != nil {
		r.mu.Lock()
		p.lastErr = fmt.Errorf("patching the Deployment status: %w", err)
		r.mu.Unlock()
	}
}

// reap drops p's exited pods and a rollout superseded before it was ready, and says what
// to start: the first pod or a replacement for a dead one (startCur), or the new
// template's pod next to the serving one (startNext; Kamaji's default strategy is
// maxSurge 100%, maxUnavailable 0: deployment.go setStrategy). r.mu is held.
func (r *PodRunner) reap(p *runnerPod, template string) (startCur, startNext bool) {
	// A dead container is restarted in place with back-off, as restartPolicy Always
	// (1 s, 2 s, ... 16 s); a pod rolling out replaces a dead one at once.
	died := func(i *instance) {
		p.lastErr = i.proc.ExitError()
		p.restarts++
		p.nextTry = time.Now().Add(time.Duration(1<<min(p.restarts-1, 4)) * time.Second)
	}
	if p.cur != nil && p.cur.proc.Exited() {
		died(p.cur)
		r.proxy.Unroute(p.cur.addr())
		p.cur = nil
	}
	if p.next != nil && p.next.proc.Exited() {
		died(p.next)
		p.next = nil
	}
	if p.next != nil && p.next.template != template {
		r.stopLater(p.next)
		p.next = nil
	}
	if p.cur == nil && p.next != nil {
		p.cur, p.next = p.next, nil
	}
	return p.cur == nil, p.cur != nil && p.cur.template != template && p.next == nil
}

// probeAndPromote runs the readiness probe of p's pods; once the rolling-out pod is
// ready it takes the traffic and the old one goes. It returns the pods serving and
// rolling out after that.
func (r *PodRunner) probeAndPromote(d *appsv1.Deployment, p *runnerPod) (cur, next *instance) {
	r.mu.Lock()
	cur, next = p.cur, p.next
	r.mu.Unlock()
	curReady := cur != nil && !cur.proc.Exited() && r.ready(d, cur.addr())
	nextReady := next != nil && !next.proc.Exited() && r.ready(d, next.addr())
	var old *instance
	r.mu.Lock()
	if cur != nil {
		cur.ready = curReady
	}
	if next != nil {
		next.ready = nextReady
		if nextReady && p.next == next {
			old, p.cur, p.next = p.cur, next, nil
			cur, next = p.cur, nil
		}
	}
	r.mu.Unlock()
	if old != nil {
		r.stopLater(old)
	}
	return cur, next
}

// templateHash identifies the pod template a process was started from.
func templateHash(d *appsv1.Deployment) string {
	b, _ := json.Marshal(d.Spec.Template)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// start materialises the containers of d's pod template that it runs (the kube-apiserver
// and its companions) and starts them, each on a port of its own. As the kubelet keeps a
// pod in ContainerCreating until every volume can be mounted, nothing starts until all
// of them are there.
func (r *PodRunner) start(ctx context.Context, d *appsv1.Deployment, p *runnerPod, template string) (*instance, error) {
	spec := d.Spec.Template.Spec
	container := podContainer(spec, kamajiAPIServerContainer)
	if container == nil {
		return nil, fmt.Errorf("deployment %s/%s has no %s container", d.Namespace, d.Name, kamajiAPIServerContainer)
	}
	bin, ok := r.binaries[imageName(container.Image)]
	if !ok {
		return nil, fmt.Errorf("no local binary for image %s", container.Image)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	p.seq++
	dir := filepath.Join(p.dir, strconv.Itoa(p.seq))
	r.mu.Unlock()
	volumes := filepath.Join(dir, "volumes")
	args, env, err := r.containerArgs(ctx, d, *container, volumes, port)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "args"), []byte(strings.Join(args, "\n")+"\n"), 0o600)
	}
	var companions []*companion
	if err == nil {
		companions, err = r.companions(ctx, d, dir, volumes, "127.0.0.1:"+strconv.Itoa(port))
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	proc, err := hostproc.Start("kube-apiserver of "+d.Namespace+"/"+d.Name, bin, args, env, filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		return nil, err
	}
	i := &instance{proc: proc, port: port, template: template, companions: companions}
	r.mu.Lock()
	for _, c := range companions {
		r.startCompanion(d, c)
	}
	r.mu.Unlock()
	return i, nil
}

// containerArgs materialises a container's volumes under root and returns its arguments
// for a host process (runnerArgs: paths rewritten, 127.0.0.1 and port to listen on) and
// its environment (this process's without a proxy, and the container's literal values).
func (r *PodRunner) containerArgs(ctx context.Context, d *appsv1.Deployment, container corev1.Container, root string, port int) (args, env []string, err error) {
	mounts, err := materialise(ctx, r.client, d.Namespace, d.Spec.Template.Spec, container, root)
	if err != nil {
		return nil, nil, err
	}
	if len(container.Command) > 1 {
		args = append(args, container.Command[1:]...)
	}
	args = runnerArgs(append(args, container.Args...), mounts, port)
	env = hostproc.EnvWithout("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
	for _, e := range container.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return args, env, nil
}

// companions prepares the companion containers of d's pod template that have a binary:
// their volumes (shared with the kube-apiserver's where they mount the same one), their
// arguments, and their kubeconfigs pointed at apiserver, the kube-apiserver of their pod.
func (r *PodRunner) companions(ctx context.Context, d *appsv1.Deployment, dir, volumes, apiserver string) ([]*companion, error) {
	var out []*companion
	for _, name := range companionContainers {
		container := podContainer(d.Spec.Template.Spec, name)
		if container == nil {
			continue
		}
		bin, ok := r.binaries[imageName(container.Image)]
		if !ok {
			continue
		}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args, env, err := r.containerArgs(ctx, d, *container, volumes, port)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", name, err)
		}
		if err := pointKubeconfigsAt(args, apiserver); err != nil {
			return nil, fmt.Errorf("container %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".args"), []byte(strings.Join(args, "\n")+"\n"), 0o600); err != nil {
			return nil, err
		}
		out = append(out, &companion{name: name, bin: bin, args: args, env: env, port: port,
			probe: startupProbePath(*container), log: filepath.Join(dir, name+".log")})
	}
	return out, nil
}

// startCompanion starts a companion's process (r.mu is held); a failure is retried by tend.
func (r *PodRunner) startCompanion(d *appsv1.Deployment, c *companion) {
	proc, err := hostproc.Start(c.name+" of "+d.Namespace+"/"+d.Name, c.bin, c.args, c.env, c.log)
	if err != nil {
		c.lastErr = err
		c.nextTry = time.Now().Add(time.Second)
		return
	}
	c.proc, c.started = proc, false
}

// tend restarts the instance's companions that exited, with the back-off of restartPolicy
// Always (1 s, 2 s, ... 16 s), and runs the startup probe of those not started yet.
func (r *PodRunner) tend(d *appsv1.Deployment, i *instance) {
	if i == nil || i.stopping.Load() {
		return
	}
	var probe []*companion
	r.mu.Lock()
	for _, c := range i.companions {
		if c.proc != nil && c.proc.Exited() {
			c.lastErr = c.proc.ExitError()
			c.proc, c.started = nil, false
			c.restarts++
			c.nextTry = time.Now().Add(time.Duration(1<<min(c.restarts-1, 4)) * time.Second)
		}
		if c.proc == nil && time.Now().After(c.nextTry) {
			r.startCompanion(d, c)
		}
		if c.proc != nil && !c.started {
			probe = append(probe, c)
		}
	}
	r.mu.Unlock()
	for _, c := range probe {
		if r.get("https://" + c.addr() + c.probe) {
			r.mu.Lock()
			c.started = true
			r.mu.Unlock()
		}
	}
}

// podContainer is the named container of spec, or nil.
func podContainer(spec corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

// startupProbePath is the path of a container's HTTP startup probe (Kamaji gives the
// controller-manager and the scheduler /healthz), else of its liveness probe, else
// /healthz.
func startupProbePath(c corev1.Container) string {
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe} {
		if p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "" {
			return p.HTTPGet.Path
		}
	}
	return "/healthz"
}

// freePort is a free loopback port.
func freePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, portStr, _ := net.SplitHostPort(addr)
	return strconv.Atoi(portStr)
}

// kubeconfigFlags are the flags by which the controller-manager and the scheduler read a
// kubeconfig (Kamaji passes the same file to all three).
var kubeconfigFlags = []string{"--kubeconfig", "--authentication-kubeconfig", "--authorization-kubeconfig"}

// pointKubeconfigsAt rewrites, in the materialised kubeconfigs args name, every cluster
// whose server is on loopback (Kamaji's https://127.0.0.1:<networkProfile.port>: the
// kube-apiserver of the same pod) to apiserver, where that kube-apiserver listens here.
// A server elsewhere is refused: nothing routes it from a companion (it runs without the
// plane proxy).
func pointKubeconfigsAt(args []string, apiserver string) error {
	done := map[string]bool{}
	for _, a := range args {
		name, path, ok := strings.Cut(a, "=")
		if !ok || !slices.Contains(kubeconfigFlags, name) || done[path] {
			continue
		}
		done[path] = true
		cfg, err := clientcmd.LoadFromFile(path)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for cname, cluster := range cfg.Clusters {
			u, err := url.Parse(cluster.Server)
			if err != nil {
				return fmt.Errorf("%s: cluster %s: %w", name, cname, err)
			}
			if host := u.Hostname(); host != "localhost" && !net.ParseIP(host).IsLoopback() {
				return fmt.Errorf("%s: cluster %s names %s, not the kube-apiserver of its own pod on loopback", name, cname, cluster.Server)
			}
			u.Host = apiserver
			cluster.Server = u.String()
		}
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			return err
		}
	}
	return nil
}

// imageName is an image reference's last path element without tag or digest:
// registry.k8s.io/kube-apiserver:v1.30.2 -> kube-apiserver.
func imageName(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, "/"); i >= 0 {
		image = image[i+1:]
	}
	if i := strings.Index(image, ":"); i >= 0 {
		image = image[:i]
	}
	return image
}

// runnerArgs rewrites a container's arguments for a host process: paths under a mount
// point to its materialised directory, the apiserver binds loopback on port, and no
// egress selector (konnectivity) is configured.
func runnerArgs(in []string, mounts map[string]string, port int) []string {
	points := make([]string, 0, len(mounts))
	for mp := range mounts {
		points = append(points, mp)
	}
	// Longest mount path first: /etc/kubernetes/pki before /etc/kubernetes.
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	rewrite := func(v string) string {
		for _, mp := range points {
			if v == mp || strings.HasPrefix(v, mp+"/") {
				return mounts[mp] + strings.TrimPrefix(v, mp)
			}
		}
		return v
	}
	var out []string
	for _, a := range in {
		name, value, hasValue := strings.Cut(a, "=")
		switch name {
		case "--bind-address", "--secure-port", "--egress-selector-config-file":
			continue
		}
		if hasValue {
			parts := strings.Split(value, ",")
			for i := range parts {
				parts[i] = rewrite(parts[i])
			}
			a = name + "=" + strings.Join(parts, ",")
		}
		out = append(out, a)
	}
	return append(out, "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port))
}

// materialise writes the volumes container mounts under root, as the kubelet would, and
// returns mount path -> local path.
func materialise(ctx context.Context, c client.Client, namespace string, spec corev1.PodSpec, container corev1.Container, root string) (map[string]string, error) {
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	out := map[string]string{}
	for _, vm := range container.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %s names no volume", vm.Name)
		}
		local := filepath.Join(root, vm.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			return nil, err
		}
		files := map[string][]byte{}
		switch {
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				switch {
				case src.Secret != nil:
					if err := secretFiles(ctx, c, namespace, src.Secret.Name, src.Secret.Items, src.Secret.Optional, files); err != nil {
						return nil, err
					}
				case src.ConfigMap != nil:
					if err := configMapFiles(ctx, c, namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, files); err != nil {
						return nil, err
					}
				default:
					return nil, fmt.Errorf("volume %s: projected source %+v is not supported by the pod runner", v.Name, src)
				}
			}
		case v.Secret != nil:
			if err := secretFiles(ctx, c, namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, files); err != nil {
				return nil, err
			}
		case v.ConfigMap != nil:
			if err := configMapFiles(ctx, c, namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, files); err != nil {
				return nil, err
			}
		case v.EmptyDir != nil:
		default:
			return nil, fmt.Errorf("volume %s: only Secret, ConfigMap, projected and emptyDir volumes are supported by the pod runner", v.Name)
		}
		for path, b := range files {
			f := filepath.Join(local, path)
			if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
				return nil, err
			}
			if err := os.WriteFile(f, b, 0o600); err != nil {
				return nil, err
			}
		}
		if vm.SubPath != "" {
			local = filepath.Join(local, vm.SubPath)
		}
		out[vm.MountPath] = local
	}
	return out, nil
}

func secretFiles(ctx context.Context, c client.Client, namespace, name string, items []corev1.KeyToPath, optional *bool, into map[string][]byte) error {
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return nil
		}
		return fmt.Errorf("secret %s/%s: %w", namespace, name, err)
	}
	return keyFiles(s.Data, items, "secret "+namespace+"/"+name, into)
}

func configMapFiles(ctx context.Context, c client.Client, namespace, name string, items []corev1.KeyToPath, optional *bool, into map[string][]byte) error {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return nil
		}
		return fmt.Errorf("configmap %s/%s: %w", namespace, name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(data, items, "configmap "+namespace+"/"+name, into)
}

// keyFiles projects data as the kubelet does: the listed items to their paths, or every
// key to a file of its name.
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, what string, into map[string][]byte) error {
	if len(items) == 0 {
		for k, v := range data {
			into[k] = v
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("%s has no key %s yet", what, it.Key)
		}
		into[it.Path] = v
	}
	return nil
}

// ready runs the kube-apiserver container's readiness probe against the process.
func (r *PodRunner) ready(d *appsv1.Deployment, addr string) bool {
	path := "/readyz"
	if c := podContainer(d.Spec.Template.Spec, kamajiAPIServerContainer); c != nil && c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
		path = c.ReadinessProbe.HTTPGet.Path
	}
	return r.get("https://" + addr + path)
}

// get is one HTTPS probe, as the kubelet runs one: 200 passes.
func (r *PodRunner) get(u string) bool {
	resp, err := r.probe.Get(u)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// route maps the plane's in-cluster addresses to the serving instance: the .svc names
// Kamaji writes into the *.svc kubeconfigs (internal/resources/kubeconfig.go) and the
// Service's ClusterIP, which is status.controlPlaneEndpoint and the server of admin.conf
// and super-admin.conf (internal/resources/k8s_service_resource.go).
func (r *PodRunner) route(ctx context.Context, d *appsv1.Deployment, p *runnerPod, cur *instance) {
	if cur == nil {
		return
	}
	tcp := p.tcp
	if tcp == "" {
		tcp = d.Name
	}
	svc := &corev1.Service{}
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: tcp}, svc); err != nil || len(svc.Spec.Ports) == 0 {
		return
	}
	port := strconv.Itoa(int(svc.Spec.Ports[0].Port))
	from := []string{
		tcp + "." + d.Namespace + ".svc:" + port,
		tcp + "." + d.Namespace + ".svc.cluster.local:" + port,
	}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != "" && ip != corev1.ClusterIPNone {
			from = append(from, net.JoinHostPort(ip, port))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.Join(from, ",") == strings.Join(p.routed, ",") && p.routedTo == cur.addr() {
		return
	}
	if p.routedTo != "" {
		r.proxy.Unroute(p.routedTo)
	}
	for _, f := range from {
		r.proxy.Route(f, cur.addr())
	}
	p.routed, p.routedTo = from, cur.addr()
}

// reportStatus patches the Deployment's status as the Deployment controller computes it
// from its ReplicaSets (pkg/controller/deployment/sync.go calculateStatus): the serving
// instance stands for spec.replicas pods of its template, a rolling-out one for as many
// of the new template; unavailable is all pods minus available ones.
func (r *PodRunner) reportStatus(ctx context.Context, d *appsv1.Deployment, template string, cur, next *instance) error {
	n := int32(1)
	if d.Spec.Replicas != nil {
		n = *d.Spec.Replicas
	}
	var total, updated, ready int32
	for _, i := range []*instance{cur, next} {
		if i == nil {
			continue
		}
		total += n
		if i.template == template {
			updated += n
		}
		if i.ready {
			ready += n
		}
	}
	if total == 0 {
		// Nothing runs: the new ReplicaSet still wants its pods.
		total, updated = n, n
	}
	want := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            total,
		UpdatedReplicas:     updated,
		ReadyReplicas:       ready,
		AvailableReplicas:   ready,
		UnavailableReplicas: total - ready,
	}
	got := d.Status
	if got.ObservedGeneration == want.ObservedGeneration && got.Replicas == want.Replicas &&
		got.UpdatedReplicas == want.UpdatedReplicas && got.ReadyReplicas == want.ReadyReplicas &&
		got.AvailableReplicas == want.AvailableReplicas && got.UnavailableReplicas == want.UnavailableReplicas {
		return nil
	}
	patch := client.MergeFrom(d.DeepCopy())
	d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas = want.ObservedGeneration, want.Replicas, want.UpdatedReplicas
	d.Status.ReadyReplicas, d.Status.AvailableReplicas, d.Status.UnavailableReplicas = want.ReadyReplicas, want.AvailableReplicas, want.UnavailableReplicas
	return r.client.Status().Patch(ctx, d, patch)
}
