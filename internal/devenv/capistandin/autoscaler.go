package capistandin

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
)

// autoscalers stands in for the cluster-autoscaler (its Cluster API provider,
// kubernetes/autoscaler cluster-autoscaler/cloudprovider/clusterapi) that the operator
// renders as a Deployment in each autoscaled plane's infrastructure namespace; the real
// one does not build here (the module proxy refuses k8s.io/autoscaler/cluster-autoscaler).
// For each such Deployment it acts as that Deployment's pod would: on the management
// cluster as its ServiceAccount (impersonated: the RBAC the operator binds is what it
// has), in the plane with the kubeconfig its pod mounts (the identity the operator
// issues there), every --scan-interval (10 s, the autoscaler's default). Each scan it
// finds the node groups as the provider discovers them (--node-group-auto-discovery: the
// MachineDeployments of the namespace and Cluster with both size annotations), the
// plane's unschedulable pods (PodScheduled False, Unschedulable: the scheduler's
// verdict), plans the scale-up (planScaleUp), sets each growing group's replicas through
// the MachineDeployment's scale subresource, raises a group below its minimum to it
// (--enforce-node-group-min-size), and tells each pending pod why in an event, as the
// autoscaler does (TriggeredScaleUp, NotTriggerScaleUp, from "cluster-autoscaler").
// Not stood in: scale-down (the autoscaler's default waits 10 minutes of a node unneeded),
// expanders other than a fixed order, scale-from-zero templates, its status ConfigMap.
type autoscalers struct {
	admin  client.Client // finds the Deployments and what their pods mount
	cfg    *rest.Config  // an administrator's, impersonated as each autoscaler
	scheme *runtime.Scheme
	failed func(deployment string, err error)

	mu   sync.Mutex
	last map[types.UID]time.Time
	told map[string]string // pod UID → the last event told it (reason and message)
	errs map[types.UID]error
}

// defaultScanInterval is the autoscaler's --scan-interval default.
const defaultScanInterval = 10 * time.Second

// Start runs the scans until ctx ends (a manager.Runnable).
func (a *autoscalers) Start(ctx context.Context) error {
	for {
		a.pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (a *autoscalers) pass(ctx context.Context) {
	// The operator labels the autoscaler's pods, not its Deployment, with its name.
	var list appsv1.DeploymentList
	if err := a.admin.List(ctx, &list, client.MatchingLabels{cpv1.ManagedByLabel: cpv1.ManagedByValue}); err != nil {
		return
	}
	for i := range list.Items {
		d := &list.Items[i]
		if d.Spec.Template.Labels[cpv1.AppNameLabel] != render.AutoscalerComponent || len(d.Spec.Template.Spec.Containers) == 0 || !d.DeletionTimestamp.IsZero() {
			continue
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		a.mu.Lock()
		due := time.Since(a.last[d.UID]) >= scanInterval(args)
		if due {
			a.last[d.UID] = time.Now()
		}
		a.mu.Unlock()
		if !due {
			continue
		}
		err := a.scan(ctx, d, args)
		a.mu.Lock()
		fresh := err != nil && (a.errs[d.UID] == nil || a.errs[d.UID].Error() != err.Error())
		a.errs[d.UID] = err
		a.mu.Unlock()
		if fresh {
			// As the autoscaler logs a failed scan (once per new error here).
			ctrl.Log.WithName("cluster-autoscaler").Error(err, "scan failed", "deployment", d.Namespace+"/"+d.Name)
			if a.failed != nil {
				a.failed(d.Namespace+"/"+d.Name, err)
			}
		}
	}
}

// scanInterval is --scan-interval, or the default.
func scanInterval(args []string) time.Duration {
	for _, arg := range args {
		if v, ok := strings.CutPrefix(arg, "--scan-interval="); ok {
			if d, err := time.ParseDuration(v); err == nil {
				return d
			}
		}
	}
	return defaultScanInterval
}

// discovery reads --node-group-auto-discovery=clusterapi:namespace=<ns>,clusterName=<c>.
func discovery(args []string) (namespace, cluster string, err error) {
	for _, arg := range args {
		spec, ok := strings.CutPrefix(arg, "--node-group-auto-discovery=clusterapi:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(spec, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "namespace":
				namespace = v
			case "clusterName":
				cluster = v
			}
		}
		return namespace, cluster, nil
	}
	return "", "", fmt.Errorf("no --node-group-auto-discovery=clusterapi:... among %v", args)
}

func (a *autoscalers) scan(ctx context.Context, d *appsv1.Deployment, args []string) error {
	namespace, cluster, err := discovery(args)
	if err != nil {
		return err
	}
	mgmt, err := a.asServiceAccount(d)
	if err != nil {
		return err
	}
	plane, err := a.planeClient(ctx, d, args)
	if err != nil {
		return err
	}
	var mds clusterv1.MachineDeploymentList
	if err := mgmt.List(ctx, &mds, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
		return fmt.Errorf("listing the node groups as the autoscaler: %w", err)
	}
	var machines clusterv1.MachineList
	if err := mgmt.List(ctx, &machines, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
		return fmt.Errorf("listing the machines as the autoscaler: %w", err)
	}
	var nodes corev1.NodeList
	if err := plane.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing the plane's nodes as the autoscaler: %w", err)
	}
	var pods corev1.PodList
	if err := plane.List(ctx, &pods); err != nil {
		return fmt.Errorf("listing the plane's pods as the autoscaler: %w", err)
	}
	byProvider := map[string]*corev1.Node{}
	for i := range nodes.Items {
		if id := nodes.Items[i].Spec.ProviderID; id != "" {
			byProvider[id] = &nodes.Items[i]
		}
	}
	var groups []nodeGroup
	mdByID := map[string]*clusterv1.MachineDeployment{}
	for i := range mds.Items {
		md := &mds.Items[i]
		g, ok := groupOf(md, machines.Items, byProvider)
		if !ok {
			continue
		}
		groups = append(groups, g)
		mdByID[g.ID] = md
	}
	var pending []*corev1.Pod
	for i := range pods.Items {
		if unschedulable(&pods.Items[i]) {
			pending = append(pending, &pods.Items[i])
		}
	}
	plan := planScaleUp(groups, pending)
	for _, g := range groups {
		if g.Replicas < g.Min && plan.Targets[g.ID] < g.Min {
			plan.Targets[g.ID] = g.Min
		}
	}
	for id, target := range plan.Targets {
		md := mdByID[id]
		scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: md.Name}, Spec: autoscalingv1.ScaleSpec{Replicas: target}}
		if err := mgmt.SubResource("scale").Update(ctx, md, client.WithSubResourceBody(scale)); err != nil {
			return fmt.Errorf("scaling %s to %d as the autoscaler: %w", id, target, err)
		}
	}
	for i := range pending {
		if v, ok := plan.Pods[key(pending[i])]; ok {
			a.tell(ctx, plane, pending[i], v)
		}
	}
	return nil
}

// groupOf is a MachineDeployment as a node group, if both size annotations bound it.
func groupOf(md *clusterv1.MachineDeployment, machines []clusterv1.Machine, nodes map[string]*corev1.Node) (nodeGroup, bool) {
	lo, errMin := strconv.Atoi(md.Annotations[cpv1.AutoscalerMinSizeAnnotation])
	hi, errMax := strconv.Atoi(md.Annotations[cpv1.AutoscalerMaxSizeAnnotation])
	if errMin != nil || errMax != nil {
		return nodeGroup{}, false
	}
	g := nodeGroup{ID: "MachineDeployment/" + md.Namespace + "/" + md.Name, Min: int32(lo), Max: int32(hi)}
	if md.Spec.Replicas != nil {
		g.Replicas = *md.Spec.Replicas
	}
	for _, m := range machines {
		if m.Labels[clusterv1.MachineDeploymentNameLabel] != md.Name {
			continue
		}
		n, ok := nodes[m.Spec.ProviderID]
		if !ok {
			continue
		}
		g.Registered++
		if g.Template == nil && ready(n) {
			g.Template = n
		}
	}
	return g, true
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// unschedulable is the scheduler's verdict the autoscaler acts on.
func unschedulable(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" || !p.DeletionTimestamp.IsZero() {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}

// tell records the verdict on the pod as an event, once per verdict (the autoscaler's
// recorder deduplicates the same way).
func (a *autoscalers) tell(ctx context.Context, plane client.Client, p *corev1.Pod, v podVerdict) {
	said := v.Reason + ": " + v.Message
	a.mu.Lock()
	if a.told[string(p.UID)] == said {
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: p.Namespace, GenerateName: p.Name + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Reason:         v.Reason, Message: v.Message, Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "cluster-autoscaler"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if err := plane.Create(ctx, ev); err != nil {
		return
	}
	a.mu.Lock()
	a.told[string(p.UID)] = said
	a.mu.Unlock()
}

// asServiceAccount is the management cluster as the Deployment's pod's ServiceAccount.
func (a *autoscalers) asServiceAccount(d *appsv1.Deployment) (client.Client, error) {
	cfg := rest.CopyConfig(a.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + d.Namespace + ":" + d.Spec.Template.Spec.ServiceAccountName,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + d.Namespace, "system:authenticated"},
	}
	return client.New(cfg, client.Options{Scheme: a.scheme})
}

// planeClient is the plane with the kubeconfig the pod mounts at --kubeconfig.
func (a *autoscalers) planeClient(ctx context.Context, d *appsv1.Deployment, args []string) (client.Client, error) {
	var kubeconfig string
	for _, arg := range args {
		if v, ok := strings.CutPrefix(arg, "--kubeconfig="); ok {
			kubeconfig = v
		}
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(kubeconfig, m.MountPath+"/")
		if !ok {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			key := rel
			for _, item := range v.Secret.Items {
				if path.Clean(item.Path) == path.Clean(rel) {
					key = item.Key
				}
			}
			secret := &corev1.Secret{}
			if err := a.admin.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: v.Secret.SecretName}, secret); err != nil {
				return nil, fmt.Errorf("the autoscaler's kubeconfig Secret: %w", err)
			}
			cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[key])
			if err != nil {
				return nil, fmt.Errorf("the autoscaler's kubeconfig (%s/%s %s): %w", d.Namespace, v.Secret.SecretName, key, err)
			}
			return client.New(cfg, client.Options{Scheme: a.scheme})
		}
	}
	return nil, fmt.Errorf("no Secret volume is mounted where --kubeconfig=%s is", kubeconfig)
}
