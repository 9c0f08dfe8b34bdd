package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cozystack/computeplane/controllers/computeplane"
	"github.com/cozystack/computeplane/controllers/tenancy"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	kamajiv1alpha1 "github.com/clastix/kamaji/api/v1alpha1"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/internal/devenv"
	"github.com/cozystack/computeplane/netpol"
	"github.com/cozystack/computeplane/remote"
)

// provideWithTenant plays Cluster API and Kamaji for a plane whose control plane is a
// real second apiserver: conditions, TenantControlPlane status, admin kubeconfig Secret.
func provideWithTenant(t *testing.T, ctx context.Context, p *cpv1.ComputePlane, tenant *devenv.Cluster) {
	t.Helper()
	infra := infraOf(p)
	cluster := &clusterv1.Cluster{}
	eventually(t, settle, func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: infra, Name: p.Name}, cluster)
	})
	setClusterCondition(ctx, t, cluster, clusterv1.ClusterInfrastructureReadyCondition, metav1.ConditionTrue, "Ready", "")
	setClusterCondition(ctx, t, cluster, clusterv1.ClusterControlPlaneInitializedCondition, metav1.ConditionTrue, "Initialized", "")
	secret, err := devenv.AdminKubeconfigSecret(tenant, infra, p.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	tcp := newTCP(infra, p.Name)
	if err := k8s.Create(ctx, tcp); err != nil {
		t.Fatal(err)
	}
	tcp.Status.Kubernetes.Version = kamajiv1alpha1.KubernetesVersion{Version: "v1.33.4", Status: ptr.To(kamajiv1alpha1.VersionReady)}
	tcp.Status.KubeConfig.Admin.SecretName = secret.Name
	tcp.Status.ControlPlaneEndpoint = strings.TrimPrefix(tenant.Config.Host, "https://")
	if err := k8s.Status().Update(ctx, tcp); err != nil {
		t.Fatal(err)
	}
}

// operatorClient talks to the plane with the admin kubeconfig the operator uses.
func operatorClient(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) client.Client {
	t.Helper()
	c, err := devenv.PlaneAdminClient(ctx, k8s, infraOf(p), p.Name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkApplier uses the applier kubeconfig as Flux does: impersonating the deployer it
// may deploy into the placement namespaces and nowhere else; as itself, or
// impersonating anyone else, it may do nothing.
func checkApplier(t *testing.T, ctx context.Context, secret *corev1.Secret, deployerNS string) {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	// A clientset, not a controller-runtime client: the latter runs discovery first,
	// which hides the refusal behind "failed to get server groups".
	as := func(user string) kubernetes.Interface {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user}
		return kubernetes.NewForConfigOrDie(c)
	}
	create := func(cs kubernetes.Interface, ns string) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe-" + rand.String(5)}}
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	deployer := as("system:serviceaccount:" + deployerNS + ":computeplane-deployer")
	if err := create(deployer, "notebooks"); err != nil {
		t.Errorf("the deployer cannot deploy into a placement namespace: %v", err)
	}
	denied(t, create(deployer, "kube-system"), "forbidden")
	denied(t, create(as("system:serviceaccount:"+deployerNS+":default"), "notebooks"), "cannot impersonate")
	denied(t, create(kubernetes.NewForConfigOrDie(cfg), "notebooks"), "forbidden")
}

// tenantRBAC: a tenant bound to admin in its namespace (plus the operator's tenant roles,
// which a real cluster aggregates into admin; envtest runs no aggregation controller)
// reads its plane and its status but not the admin kubeconfig in the infrastructure
// namespace.
func tenantRBAC(t *testing.T, ctx context.Context, p *cpv1.ComputePlane) {
	t.Helper()
	view := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "tenant-view-" + p.Namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"computeplane.cozystack.io"}, Resources: []string{"computeplanes", "computeplanes/status"}, Verbs: []string{"get", "list", "watch"}}}}
	if err := k8s.Create(ctx, view); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"admin", view.Name} {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "alice-" + role},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
		if err := k8s.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
	}
	can := func(verb, resource, sub, ns, name string) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: groupOf(resource), Resource: resource,
				Subresource: sub, Namespace: ns, Name: name}}}
		if err := k8s.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	// RBAC takes a moment to see new bindings.
	eventually(t, settle, func() error {
		if !can("get", "computeplanes", "status", p.Namespace, p.Name) {
			return errors.New("the tenant cannot read its ComputePlane's status")
		}
		return nil
	})
	if can("get", "secrets", "", infraOf(p), p.Name+"-admin-kubeconfig") {
		t.Error("the tenant can read the admin kubeconfig")
	}
	if can("list", "secrets", "", infraOf(p), "") {
		t.Error("the tenant can list Secrets in the infrastructure namespace")
	}
}

func groupOf(resource string) string {
	if resource == "computeplanes" {
		return "computeplane.cozystack.io"
	}
	return ""
}

// asUser is a client to the tenant apiserver impersonating a non-operator user with full
// RBAC (system:masters): only admission can stop it.
func asUser(t *testing.T, tenant *devenv.Cluster, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(tenant.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func denied(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("accepted; want it refused with %q", want)
	} else if !strings.Contains(err.Error(), want) {
		t.Errorf("refused with %q; want %q", err, want)
	}
}

// eventuallyDenied retries a request until the plane refuses it as wanted: the
// apiserver loads new admission policies a moment after they are created.
func eventuallyDenied(t *testing.T, do func() error, want string) {
	t.Helper()
	eventually(t, settle, func() error {
		err := do()
		if err == nil {
			return fmt.Errorf("accepted; want it refused with %q", want)
		}
		if !strings.Contains(err.Error(), want) {
			return fmt.Errorf("refused with %q; want %q", err, want)
		}
		return nil
	})
}

// hardening is a plane the operator hardened on a tenant apiserver of the test's own,
// Ready, with what the subtests share.
type hardening struct {
	tenant        *devenv.Cluster
	p             *cpv1.ComputePlane
	key           client.ObjectKey
	tc, operator  client.Client
	secretKey     client.ObjectKey
	applierSecret *corev1.Secret
}

func hardenedPlane(t *testing.T, ctx context.Context) *hardening {
	t.Helper()
	tenant, err := devenv.StartTenant(k8s.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })

	class := newClass("hard-"+rand.String(6), func(c *cpv1.ComputePlaneClass) {
		c.Spec.PlacementNamespaces.Quota = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("20")}
		c.Spec.PlacementNamespaces.LimitRange = []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			Default: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}}
	})
	p := planeWithClass(t, ctx, class, withGroup("workers", medium), func(p *cpv1.ComputePlane) {
		p.Spec.PlacementNamespaces = []string{"notebooks"}
	})
	key := client.ObjectKeyFromObject(p)
	provideWithTenant(t, ctx, p, tenant)

	eventually(t, settle, conditionIs(ctx, key, cpv1.PodSecurityCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.AdmissionCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.EgressCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))

	return &hardening{tenant: tenant, p: p, key: key, tc: tenant.Client, operator: operatorClient(t, ctx, p),
		secretKey: client.ObjectKey{Namespace: p.Namespace, Name: tenancy.ApplierSecretName(p)}, applierSecret: &corev1.Secret{}}
}

// TestHardeningOnARealPlane hardens a second, real apiserver through a Kamaji-shaped
// admin kubeconfig and checks that the plane's own admission chain enforces it.
func TestHardeningOnARealPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := hardenedPlane(t, ctx)
	tenant, p, key, tc, operator, secretKey, applierSecret := h.tenant, h.p, h.key, h.tc, h.operator, h.secretKey, h.applierSecret

	t.Run("egress baseline in the infrastructure namespace, restored when deleted", func(t *testing.T) {
		// The egress baseline is in the infrastructure namespace, accepted by the real Cilium
		// schema, and comes back when deleted.
		cnp := &ciliumv2.CiliumNetworkPolicy{}
		cnpKey := client.ObjectKey{Namespace: infraOf(p), Name: netpol.BaselineName(p.Name, string(p.UID))}
		if err := k8s.Get(ctx, cnpKey, cnp); err != nil {
			t.Fatal(err)
		}
		if len(cnp.Spec.EgressDeny) != 2 || cnp.Spec.EgressDeny[0].ToEntities[0] != "kube-apiserver" || cnp.Spec.EgressDeny[1].ToCIDR[0] != "169.254.0.0/16" {
			t.Errorf("baseline egressDeny = %+v", cnp.Spec.EgressDeny)
		}
		cnpUID := cnp.UID
		if err := k8s.Delete(ctx, cnp); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, func() error {
			if err := k8s.Get(ctx, cnpKey, cnp); err != nil {
				return err
			}
			if cnp.UID == cnpUID {
				return errors.New("baseline not recreated yet")
			}
			return nil
		})
		eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	})

	t.Run("placement and system namespaces labelled, with quota and limits", func(t *testing.T) {
		for _, name := range []string{p.Namespace, "notebooks"} {
			ns := &corev1.Namespace{}
			if err := tc.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
				t.Fatalf("placement namespace %s not created in the plane: %v", name, err)
			}
			if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" || ns.Labels[cpv1.PlaneNameLabel] != "plane" {
				t.Errorf("placement namespace %s labels = %v", name, ns.Labels)
			}
			if err := tc.Get(ctx, client.ObjectKey{Namespace: name, Name: "computeplane"}, &corev1.ResourceQuota{}); err != nil {
				t.Errorf("no ResourceQuota in %s: %v", name, err)
			}
			if err := tc.Get(ctx, client.ObjectKey{Namespace: name, Name: "computeplane"}, &corev1.LimitRange{}); err != nil {
				t.Errorf("no LimitRange in %s: %v", name, err)
			}
		}
		for name, level := range map[string]string{"default": "restricted", "kube-system": "privileged"} {
			ns := &corev1.Namespace{}
			if err := tc.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
				t.Fatal(err)
			}
			if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != level {
				t.Errorf("namespace %s enforce = %q, want %q", name, got, level)
			}
		}
	})

	t.Run("the plane refuses dangerous pods, even from its admin", func(t *testing.T) {
		// The plane's own apiserver refuses dangerous pods, even from its admin.
		pod := func(name string, mut func(*corev1.Pod)) *corev1.Pod {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", Name: name},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
			mut(p)
			return p
		}
		denied(t, tc.Create(ctx, pod("privileged", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		})), "privileged")
		denied(t, tc.Create(ctx, pod("hostpath", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		})), "hostPath")
	})

	t.Run("a non-operator identity cannot relabel, expose or re-wire admission", func(t *testing.T) {
		// A non-operator identity with full RBAC cannot relabel, expose or re-wire admission.
		mallory := asUser(t, tenant, "mallory")
		ns := &corev1.Namespace{}
		if err := mallory.Get(ctx, client.ObjectKey{Name: "notebooks"}, ns); err != nil {
			t.Fatal(err)
		}
		eventuallyDenied(t, func() error {
			relabel := ns.DeepCopy()
			relabel.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
			return mallory.Patch(ctx, relabel, client.MergeFrom(ns), client.DryRunAll)
		}, "owned by the operator")
		eventuallyDenied(t, func() error {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "notebooks", Name: "exposed"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}
			return mallory.Create(ctx, svc, client.DryRunAll)
		}, "NodePort and LoadBalancer Services are not allowed")
		eventuallyDenied(t, func() error {
			hook := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-injector"},
				Webhooks: []admissionv1.MutatingWebhook{{Name: "inject.example.com", SideEffects: ptr.To(admissionv1.SideEffectClassNone),
					AdmissionReviewVersions: []string{"v1"},
					ClientConfig:            admissionv1.WebhookClientConfig{URL: ptr.To("https://example.com/inject")}}}}
			return mallory.Create(ctx, hook, client.DryRunAll)
		}, "admission configuration and API registration of a ComputePlane are owned by the operator")
	})

	t.Run("a namespace created later is labelled", func(t *testing.T) {
		// A namespace created later gets labelled.
		if err := tc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "late"}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, func() error {
			late := &corev1.Namespace{}
			if err := tc.Get(ctx, client.ObjectKey{Name: "late"}, late); err != nil {
				return err
			}
			if late.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
				return fmt.Errorf("late namespace labels = %v", late.Labels)
			}
			return nil
		})
	})

	t.Run("a relabelled placement namespace is restored", func(t *testing.T) {
		// Drift in a placement namespace: relabelled with the operator's own credential (the
		// only one admission lets through), restored.
		eventually(t, settle, conditionIs(ctx, key, cpv1.PodSecurityCondition, metav1.ConditionTrue, cpv1.SucceededReason))
		nb := &corev1.Namespace{}
		if err := tc.Get(ctx, client.ObjectKey{Name: "notebooks"}, nb); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(nb.DeepCopy())
		nb.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
		if err := operator.Patch(ctx, nb, patch); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, func() error {
			if err := tc.Get(ctx, client.ObjectKey{Name: "notebooks"}, nb); err != nil {
				return err
			}
			if got := nb.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
				return fmt.Errorf("placement namespace enforce = %q", got)
			}
			return nil
		})
	})

	t.Run("a deleted admission policy is reported and restored", func(t *testing.T) {
		// Drift: the operator's own credential deletes a policy; it is reported and restored.
		// (First let the plane settle from the late namespace.)
		eventually(t, settle, conditionIs(ctx, key, cpv1.PodSecurityCondition, metav1.ConditionTrue, cpv1.SucceededReason))
		vap := &admissionv1.ValidatingAdmissionPolicy{}
		if err := tc.Get(ctx, client.ObjectKey{Name: "computeplane-pod-hardening"}, vap); err != nil {
			t.Fatal(err)
		}
		oldUID := vap.UID
		settled := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, settled); err != nil {
			t.Fatal(err)
		}
		before := apimeta.FindStatusCondition(settled.Status.Conditions, cpv1.AdmissionCondition).LastTransitionTime
		readyBefore := apimeta.FindStatusCondition(settled.Status.Conditions, cpv1.ReadyCondition).LastTransitionTime
		time.Sleep(time.Second) // transition times have a one-second resolution
		if err := tc.Delete(ctx, vap); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, func() error {
			if err := tc.Get(ctx, client.ObjectKey{Name: "computeplane-pod-hardening"}, vap); err != nil {
				return err
			}
			if vap.UID == oldUID {
				return errors.New("not recreated yet")
			}
			return nil
		})
		// It went False (Drifted) and back: the condition's transition time moved.
		eventually(t, settle, func() error {
			got := &cpv1.ComputePlane{}
			if err := k8s.Get(ctx, key, got); err != nil {
				return err
			}
			c := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.AdmissionCondition)
			if c.Status != metav1.ConditionTrue || !c.LastTransitionTime.After(before.Time) {
				return fmt.Errorf("AdmissionPoliciesReady = %s since %s, want True again after the drift at %s", c.Status, c.LastTransitionTime, before)
			}
			ready := apimeta.FindStatusCondition(got.Status.Conditions, cpv1.ReadyCondition)
			if ready.Status != metav1.ConditionTrue || !ready.LastTransitionTime.After(readyBefore.Time) {
				return fmt.Errorf("Ready = %s since %s, want it to have gone False and back after %s", ready.Status, ready.LastTransitionTime, readyBefore)
			}
			return nil
		})
		eventually(t, settle, conditionIs(ctx, key, cpv1.AdmissionCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	})

	t.Run("the admin kubeconfig never reaches the tenant namespace", func(t *testing.T) {
		// The admin kubeconfig is referenced only by the operator's own add-on releases, and
		// no Secret holding it exists in the tenant namespace.
		eventually(t, settle, conditionIs(ctx, key, cpv1.IdentitiesCondition, metav1.ConditionTrue, cpv1.SucceededReason))
		adminSecret := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: infraOf(p), Name: p.Name + "-admin-kubeconfig"}, adminSecret); err != nil {
			t.Fatal(err)
		}
		adminCfg, err := clientcmd.RESTConfigFromKubeConfig(adminSecret.Data["super-admin.svc"])
		if err != nil {
			t.Fatal(err)
		}
		var secrets corev1.SecretList
		if err := k8s.List(ctx, &secrets, client.InNamespace(p.Namespace)); err != nil {
			t.Fatal(err)
		}
		kubeconfigs := 0
		for _, s := range secrets.Items {
			for _, v := range s.Data {
				cfg, err := clientcmd.RESTConfigFromKubeConfig(v)
				if err != nil {
					continue
				}
				kubeconfigs++
				if len(cfg.CertData) > 0 && string(cfg.CertData) == string(adminCfg.CertData) {
					t.Errorf("Secret %s in the tenant namespace holds the admin credential", s.Name)
				}
			}
		}
		if kubeconfigs != 1 {
			t.Errorf("the tenant namespace holds %d kubeconfigs, want exactly the applier's", kubeconfigs)
		}
	})

	t.Run("the applier works only through the deployer, in the placement namespaces", func(t *testing.T) {
		// Identities: the applier kubeconfig in the tenant namespace works only through the
		// deployer, and only in the placement namespaces.
		eventually(t, settle, conditionIs(ctx, key, cpv1.IdentitiesCondition, metav1.ConditionTrue, cpv1.SucceededReason))
		if err := k8s.Get(ctx, secretKey, applierSecret); err != nil {
			t.Fatal(err)
		}
		if applierSecret.Labels["reconcile.fluxcd.io/watch"] != "Enabled" {
			t.Errorf("applier Secret labels = %v", applierSecret.Labels)
		}
		checkApplier(t, ctx, applierSecret, p.Namespace)
	})

	t.Run("a tenant admin sees its plane, not the admin kubeconfig", func(t *testing.T) {
		// A tenant with admin in its namespace sees its plane, not the admin kubeconfig.
		tenantRBAC(t, ctx, p)
	})

	t.Run("a Ready plane reconciles with no write and no event", func(t *testing.T) {
		// A Ready plane is quiet: reconciling it again (hardening read-back, egress, identities
		// included) writes nothing to the management cluster and emits no event.
		counting, writes := countingClient(t, reconciler.Client)
		recorder := events.NewFakeRecorder(10)
		quiet := &computeplane.Reconciler{Client: counting, APIReader: k8s, Addons: reconciler.Addons, Events: recorder,
			RequeueInterval: time.Minute, TokenLifetime: time.Hour,
			Planes: &remote.ClusterCache{Scheme: k8s.Scheme(), Timeout: 2 * time.Second, ProbeInterval: 2 * time.Second, Grace: time.Second}}
		for i := range 2 {
			if _, err := quiet.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
				t.Fatalf("reconcile %d of a Ready plane: %v", i, err)
			}
		}
		if n := writes.Load(); n != 0 {
			t.Errorf("reconciling a Ready plane made %d writes, want 0", n)
		}
		if n := len(recorder.Events); n != 0 {
			t.Errorf("reconciling a Ready plane emitted %d events: %v", n, <-recorder.Events)
		}
	})

	t.Run("only the operator's add-on releases reference an admin kubeconfig", func(t *testing.T) {
		var hrs helmv2.HelmReleaseList
		if err := k8s.List(ctx, &hrs); err != nil {
			t.Fatal(err)
		}
		for _, hr := range hrs.Items {
			// Every plane's admin kubeconfig is referenced only from its own infrastructure
			// namespace, by the operator's add-on releases.
			kc := hr.Spec.KubeConfig
			if kc == nil || kc.SecretRef == nil || !strings.HasSuffix(kc.SecretRef.Name, "-admin-kubeconfig") {
				continue
			}
			owner := planeOfLabels(hr.Labels)
			inPlace := owner.UID != "" && hr.Namespace == infraOf(owner)
			if !inPlace || hr.Labels["computeplane.cozystack.io/addon-role"] == "" {
				t.Errorf("HelmRelease %s/%s references the admin kubeconfig but is not an operator add-on", hr.Namespace, hr.Name)
			}
		}
	})
}

// TestApplierCredentialLifecycle: on a hardened plane, the applier's token is rotated in
// place near its expiry, a deleted applier ServiceAccount is recreated and the credential
// re-issued, and closing the gate revokes the credential while reopening re-issues it.
// The subtests run in order: each starts from the credential the previous one left.
func TestApplierCredentialLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := hardenedPlane(t, ctx)
	p, key, tc, operator, secretKey, applierSecret := h.p, h.key, h.tc, h.operator, h.secretKey, h.applierSecret

	t.Run("the applier kubeconfig is issued", func(t *testing.T) {
		eventually(t, settle, conditionIs(ctx, key, cpv1.IdentitiesCondition, metav1.ConditionTrue, cpv1.SucceededReason))
		if err := k8s.Get(ctx, secretKey, applierSecret); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a token near its expiry is rotated in place", func(t *testing.T) {
		// Rotation: a token nearing its expiry is replaced (the test moves the recorded
		// expiry forward in time instead of waiting), without the Secret going away.
		oldToken, oldUID := string(applierSecret.Data["value"]), applierSecret.UID
		patchSecret := client.MergeFrom(applierSecret.DeepCopy())
		applierSecret.Annotations[cpv1.TokenExpiresAtAnnotation] = time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
		if err := k8s.Patch(ctx, applierSecret, patchSecret); err != nil {
			t.Fatal(err)
		}
		requestReconcile(t, ctx, p, "rotate")
		eventually(t, settle, func() error {
			if err := k8s.Get(ctx, secretKey, applierSecret); err != nil {
				return err
			}
			if string(applierSecret.Data["value"]) == oldToken {
				return errors.New("token not rotated")
			}
			return nil
		})
		if applierSecret.UID != oldUID {
			t.Error("the Secret was recreated (the rotation taken for drift, the gate closed), not rotated in place")
		}
		checkApplier(t, ctx, applierSecret, p.Namespace)
	})

	t.Run("a deleted applier ServiceAccount is recreated and the credential re-issued", func(t *testing.T) {
		// A plane admin other than the operator may not delete the applier's ServiceAccount
		// (nor anything else the operator created in a namespace).
		applier := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "computeplane-system", Name: "computeplane-applier"}}
		denied(t, tc.Delete(ctx, applier), ownedByOperator)
		// Deleted with the operator's own credential, it is recreated and the credential
		// re-issued: at the next full read (no watch sees those kinds; a reconcile request
		// forces one).
		oldApplier := applierSecret.Annotations[cpv1.TokenServiceAccountUIDAnnotation]
		if err := operator.Delete(ctx, applier); err != nil {
			t.Fatal(err)
		}
		requestReconcile(t, ctx, p, "applier-deleted")
		eventually(t, settle, func() error {
			if err := k8s.Get(ctx, secretKey, applierSecret); err != nil {
				return err
			}
			if applierSecret.Annotations[cpv1.TokenServiceAccountUIDAnnotation] == oldApplier {
				return errors.New("credential not re-issued for the new ServiceAccount")
			}
			return nil
		})
		checkApplier(t, ctx, applierSecret, p.Namespace)
	})

	t.Run("closing the gate revokes the credential, reopening re-issues it", func(t *testing.T) {
		// Closing the gate (here: the spec now exceeds the class) revokes the credential: the
		// Secret goes, and so does the applier's right to impersonate in the plane. Reopening
		// it issues a new one.
		patchPlane := client.MergeFrom(p.DeepCopy())
		g := p.Spec.NodeGroups["workers"]
		g.MaxReplicas = 99
		p.Spec.NodeGroups["workers"] = g
		if err := k8s.Patch(ctx, p, patchPlane); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, func() error {
			if err := k8s.Get(ctx, secretKey, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("applier Secret still there (err=%v)", err)
			}
			err := tc.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: "computeplane-applier"}, &rbacv1.RoleBinding{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("applier impersonation binding still there (err=%v)", err)
			}
			return nil
		})
		// The revocation comes before the status that says why: wait for that too, or the
		// Ready=True below could be the one from before the gate closed.
		eventually(t, settle, conditionIs(ctx, key, cpv1.ValidCondition, metav1.ConditionFalse, cpv1.SpecExceedsClassReason))
		patchPlane = client.MergeFrom(p.DeepCopy())
		g.MaxReplicas = 2
		p.Spec.NodeGroups["workers"] = g
		if err := k8s.Patch(ctx, p, patchPlane); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, func() error {
			got := &cpv1.ComputePlane{}
			if err := k8s.Get(ctx, key, got); err != nil {
				return err
			}
			if got.Status.ObservedGeneration != p.Generation {
				return fmt.Errorf("observedGeneration %d, want %d", got.Status.ObservedGeneration, p.Generation)
			}
			return conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason)()
		})
		if err := k8s.Get(ctx, secretKey, applierSecret); err != nil {
			t.Fatal(err)
		}
		checkApplier(t, ctx, applierSecret, p.Namespace)
	})
}

// TestUnreachablePlaneClosesTheGate: a hardened plane whose apiserver goes away closes
// its gate with a reason after the grace, revokes the credential, and does not churn.
func TestUnreachablePlaneClosesTheGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := hardenedPlane(t, ctx)
	tenant, key, secretKey := h.tenant, h.key, h.secretKey

	t.Run("an unreachable plane closes the gate, with no hot loop", func(t *testing.T) {
		// The plane's apiserver goes away: the gate closes with a reason, after the grace.
		if err := tenant.Stop(); err != nil {
			t.Fatal(err)
		}
		eventually(t, settle, conditionIs(ctx, key, cpv1.PodSecurityCondition, metav1.ConditionFalse, cpv1.PlaneUnreachableReason))
		// The placement controller reports the closed gate after it (once).
		eventually(t, settle, func() error {
			p := &cpv1.ComputePlane{}
			if err := k8s.Get(ctx, key, p); err != nil {
				return err
			}
			if c := apimeta.FindStatusCondition(p.Status.Conditions, cpv1.PlacementOpenCondition); c == nil || !strings.Contains(c.Message, cpv1.PlaneUnreachableReason) {
				return fmt.Errorf("PlacementOpen = %+v", c)
			}
			return nil
		})
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		if apimeta.IsStatusConditionTrue(got.Status.Conditions, cpv1.ReadyCondition) {
			t.Error("Ready is True while the plane is unreachable")
		}
		if err := k8s.Get(ctx, secretKey, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("the applier credential outlived the open gate (err=%v)", err)
		}
		// No hot loop: while it stays down, the status does not churn.
		time.Sleep(3 * time.Second)
		later := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, later); err != nil {
			t.Fatal(err)
		}
		if later.ResourceVersion != got.ResourceVersion {
			t.Errorf("status kept changing while the plane was down: %+v\nwas: %+v", later.Status.Conditions, got.Status.Conditions)
		}
	})
}
