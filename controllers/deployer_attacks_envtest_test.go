package controllers_test

// Closing the gate must leave nothing writing as the deployer (issue 24, item 8). Flux
// impersonates the deployer only while the gate is open; a pod running as it, a
// non-expiring token Secret minted for it, or a bound token requested for it while the
// gate was open would keep applying with its rights after any closure.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/internal/devenv"
)

// deployerPodRefusal and deployerTokenRefusal are the deployer-credentials policy's
// messages.
const (
	deployerPodRefusal   = "Pods may not run as the ComputePlane deployer"
	deployerTokenRefusal = "ServiceAccount token Secrets for the ComputePlane deployer"
)

// readyRealPlane is readyPlane with the plane's ServiceAccount admission plugin on, as
// every real control plane has it (envtest turns it off, having no controller to create
// the default ServiceAccounts): a pod must name an existing ServiceAccount (the
// operator's canaries' included) and gets its token mounted when it asks. The plane's
// API server keeps an audit log.
func readyRealPlane(t *testing.T, ctx context.Context, class *cpv1.ComputePlaneClass, opts ...planeOpt) (*cpv1.ComputePlane, *devenv.Cluster) {
	t.Helper()
	// Setting the list replaces envtest's default (ServiceAccount); the plugin named
	// instead is one no test here depends on.
	tenant, err := devenv.StartTenantWith(k8s.Scheme(), devenv.TenantOptions{DisableAdmissionPlugins: []string{"DefaultIngressClass"}, Audit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Stop() })
	opts = append([]planeOpt{func(p *cpv1.ComputePlane) { p.Spec.PlacementNamespaces = []string{"notebooks"} }}, opts...)
	p := planeWithClass(t, ctx, class, opts...)
	provideWithTenant(t, ctx, p, tenant)
	eventually(t, settle, conditionIs(ctx, client.ObjectKeyFromObject(p), cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	return p, tenant
}

// compliantPod is a pod every Pod Security level and the pod hardening admit, so that
// only what it runs as can get it refused; it asks for its ServiceAccount's token.
func compliantPod(namespace, serviceAccount string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "runner-"},
		Spec: corev1.PodSpec{
			ServiceAccountName:           serviceAccount,
			AutomountServiceAccountToken: ptr.To(true),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "c", Image: "controller", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		}}
}

// refusedBy checks that err is a refusal by the plane's admission policies naming want.
func refusedBy(t *testing.T, who string, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), want) {
		t.Errorf("as %s: %v; want a refusal by the plane's policies naming %q", who, err, want)
	}
}

// TestAttackDeployerRunsAPod: a chart (the deployer itself, through Flux's credential)
// or anyone with more rights in the plane starts a controller running as the deployer,
// with its token mounted; that controller would keep applying after the gate closes.
// Every such pod is refused, whoever creates it: the operator, a plane admin and the
// controllers of the exempt namespaces (the ReplicaSet controller creates a
// Deployment's pods) included. A chart's pod running as its own ServiceAccount is not.
func TestAttackDeployerRunsAPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, tenant := readyRealPlane(t, ctx, newClass("deployer-pod-"+rand.String(6)))
	deployer := planeDeployer(t, ctx, p)
	dry := client.DryRunAll
	// The deployer's own namespace in the plane is where its ServiceAccount lives.
	ns := p.Namespace
	for who, c := range map[string]client.Client{
		"the deployer (Flux's credential)": deployer,
		"a plane admin":                    asUser(t, tenant, "plane-admin"),
		"the operator":                     operatorClient(t, ctx, p),
		"the ReplicaSet controller (an exempt namespace's ServiceAccount)": asUser(t, tenant, "system:serviceaccount:kube-system:replicaset-controller"),
		"kube-controller-manager": asUser(t, tenant, "system:kube-controller-manager"),
	} {
		refusedBy(t, who, c.Create(ctx, compliantPod(ns, cpv1.DeployerName), dry), deployerPodRefusal)
	}
	// The deprecated alias of serviceAccountName names the same ServiceAccount.
	legacy := compliantPod(ns, "")
	legacy.Spec.DeprecatedServiceAccount = cpv1.DeployerName
	refusedBy(t, "the deployer, through spec.serviceAccount", deployer.Create(ctx, legacy, dry), deployerPodRefusal)

	// A chart's own ServiceAccount and its pod are what placement is for.
	app := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	if err := deployer.Create(ctx, app); err != nil {
		t.Fatalf("the deployer cannot create a chart's ServiceAccount: %v", err)
	}
	if err := deployer.Create(ctx, compliantPod(ns, "app"), dry); err != nil {
		t.Errorf("a chart's pod running as its own ServiceAccount was refused: %v", err)
	}
}

// TestAttackDeployerLegacyToken: the deployer may create Secrets in its namespaces
// (Helm's release records), so it could ask kube-controller-manager's token controller
// for a token that never expires, by creating a kubernetes.io/service-account-token
// Secret naming itself. Such a Secret is refused to everyone, the operator and the
// add-ons' trusted ServiceAccounts (which the plane's general rule against token Secrets
// trusts) included, on create and on update.
func TestAttackDeployerLegacyToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, tenant := readyRealPlane(t, ctx, newClass("deployer-token-"+rand.String(6), trustCiliumOperator))
	deployer := planeDeployer(t, ctx, p)
	operator := operatorClient(t, ctx, p)
	token := func(sa string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, GenerateName: "forever-",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: sa}}, Type: corev1.SecretTypeServiceAccountToken}
	}
	dry := client.DryRunAll
	// Two policies refuse the deployer and a plane admin; the API server names either.
	for who, c := range map[string]client.Client{
		"the deployer (Flux's credential)": deployer,
		"a plane admin":                    asUser(t, tenant, "plane-admin"),
	} {
		if err := c.Create(ctx, token(cpv1.DeployerName), dry); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("as %s: %v; want a refusal by the plane's policies", who, err)
		}
	}
	for who, c := range map[string]client.Client{
		"the operator":                       operator,
		"an add-on's trusted ServiceAccount": asUser(t, tenant, "system:serviceaccount:kube-system:cilium-operator"),
	} {
		refusedBy(t, who, c.Create(ctx, token(cpv1.DeployerName), dry), deployerTokenRefusal)
	}
	// A token Secret of another ServiceAccount (which the operator may still create)
	// cannot be turned into the deployer's.
	other := token("app")
	if err := operator.Create(ctx, other); err != nil {
		t.Fatalf("the operator cannot create another ServiceAccount's token Secret: %v", err)
	}
	other.Annotations[corev1.ServiceAccountNameKey] = cpv1.DeployerName
	refusedBy(t, "the operator, renaming a token Secret", operator.Update(ctx, other, dry), deployerTokenRefusal)
}

// TestAttackDeployerTokenOutlivesTheGate: a token requested for the deployer while the
// gate is open (through the TokenRequest API, by a plane admin or anything that got one
// into a pod) stops working when the gate closes: the deployer's ServiceAccount, whose
// UID the token names, is deleted with the applier's. Reopened, the gate recreates the
// deployer (a new UID: the old token stays dead), with no token mounted into pods by
// default, and Flux deploys through it again (it impersonates the deployer by name).
func TestAttackDeployerTokenOutlivesTheGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p, tenant := readyRealPlane(t, ctx, newClass("deployer-outlives-"+rand.String(6)), withGroup("workers", medium))
	key := client.ObjectKeyFromObject(p)
	admin := operatorClient(t, ctx, p)
	saKey := client.ObjectKey{Namespace: p.Namespace, Name: cpv1.DeployerName}
	sa := &corev1.ServiceAccount{}
	if err := admin.Get(ctx, saKey, sa); err != nil {
		t.Fatal(err)
	}
	if a := sa.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("the deployer's ServiceAccount mounts its token into pods by default (automountServiceAccountToken=%v)", a)
	}
	firstUID := sa.UID
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := admin.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("requesting a token for the deployer: %v", err)
	}
	cfg := rest.CopyConfig(tenant.Config)
	cfg.CertData, cfg.KeyData, cfg.BearerToken = nil, nil, tr.Status.Token
	// A clientset: a controller-runtime client would hide the refusal behind discovery.
	minted := kubernetes.NewForConfigOrDie(cfg)
	deploy := func() error {
		_, err := minted.CoreV1().ConfigMaps("notebooks").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "x-"}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := deploy(); err != nil {
		t.Fatalf("the minted token does not work while the gate is open: %v", err)
	}

	// At rest with the gate open, a full read of the plane (a reconcile request asks for
	// one) reads the deployer and writes nothing there.
	from := time.Now()
	requestReconcile(t, ctx, p, "at-rest")
	eventually(t, settle, func() error {
		got := &cpv1.ComputePlane{}
		if err := k8s.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.LastHandledReconcileAt != "at-rest" {
			return fmt.Errorf("the reconcile request is not handled yet")
		}
		return nil
	})
	events, err := devenv.ReadAudit(tenant.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	readDeployer := false
	for _, ev := range operatorRequests(events, from) {
		if ev.Mutating() {
			t.Errorf("at rest the operator wrote to the plane: %s %s %s/%s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name)
		}
		readDeployer = readDeployer || ev.Verb == "get" && ev.ObjectRef.Resource == "serviceaccounts" && ev.ObjectRef.Name == cpv1.DeployerName
	}
	if !readDeployer {
		t.Error("the requested reconcile did not read the deployer: the no-write check above proves nothing")
	}

	// The gate closes (the spec now exceeds the class).
	if err := k8s.Get(ctx, key, p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	g := p.Spec.NodeGroups["workers"]
	g.MaxReplicas = 99
	p.Spec.NodeGroups["workers"] = g
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	closed := time.Now()
	eventually(t, settle, gateClosed(ctx, p))
	// The apiserver caches a token's authentication for up to 10 s.
	eventually(t, 40*time.Second, func() error {
		if err := deploy(); err == nil || !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("the deployer's token still works with the gate closed (err=%v)", err)
		}
		return nil
	})
	t.Logf("the minted deployer token was refused %s after the spec change closed the gate", time.Since(closed).Round(time.Millisecond))
	if err := admin.Get(ctx, saKey, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("the deployer's ServiceAccount is still there with the gate closed (err=%v)", err)
	}

	// Reopened: a new deployer, the old token dead, and Flux's credential works again.
	patch = client.MergeFrom(p.DeepCopy())
	g.MaxReplicas = 2
	p.Spec.NodeGroups["workers"] = g
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, conditionIs(ctx, key, cpv1.ReadyCondition, metav1.ConditionTrue, cpv1.SucceededReason))
	if err := deploy(); !apierrors.IsUnauthorized(err) {
		t.Errorf("the deployer's old token came back to life with the gate (err=%v)", err)
	}
	if err := admin.Get(ctx, saKey, sa); err != nil {
		t.Fatalf("the reopened gate did not recreate the deployer: %v", err)
	}
	if sa.UID == firstUID {
		t.Error("the deployer's ServiceAccount kept its UID across the closure")
	}
	if a := sa.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("the recreated deployer mounts its token into pods by default (automountServiceAccountToken=%v)", a)
	}
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, applierSecretKey(p), secret); err != nil {
		t.Fatal(err)
	}
	checkApplier(t, ctx, secret, p.Namespace)
}
