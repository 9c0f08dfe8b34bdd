package main

import (
	"context"
	"fmt"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/netpol"
)

// showGrants walks the sample plane's grant of the postgres Service through both sides:
// asked for by the plane, pending until the Service's owner opts in (the tenant may not
// opt in for it), granted, revoked when the owner opts out. The policy must open nothing
// before the opt-in and after the opt-out, or the demo fails.
func showGrants(ctx context.Context, c client.Client, kubectl func(...string) error, key client.ObjectKey) error {
	p := &cpv1.ComputePlane{}
	if err := c.Get(ctx, key, p); err != nil {
		return err
	}
	g := grantWalk{ctx: ctx, c: c, kubectl: kubectl, key: key,
		policy: client.ObjectKey{Namespace: p.Status.InfrastructureNamespace, Name: netpol.GrantsName(p.Name, string(p.UID))}}
	for _, part := range []func() error{g.pending, g.tenantCannotOptIn, g.ownerOptsIn, g.ownerOptsOut} {
		if err := part(); err != nil {
			return err
		}
	}
	return nil
}

// grantWalk is what the parts of showGrants share.
type grantWalk struct {
	ctx     context.Context
	c       client.Client
	kubectl func(...string) error
	key     client.ObjectKey // the plane
	policy  client.ObjectKey // its grant policy
}

// grantAccess prints each entry of a plane's status.serviceAccess.
const grantAccess = `jsonpath={range .status.serviceAccess[*]}{.name}{"\t"}{.state}{"\t"}{.message}{"\n"}{end}`

// rules is the grant policy's rule count, -1 when there is none.
func (g grantWalk) rules(ctx context.Context) (int, error) {
	cnp := &ciliumv2.CiliumNetworkPolicy{}
	if err := g.c.Get(ctx, g.policy, cnp); apierrors.IsNotFound(err) {
		return -1, nil
	} else if err != nil {
		return 0, err
	}
	return len(cnp.Spec.Egress), nil
}

// await polls done for 30 s at most; what names what failed.
func (g grantWalk) await(what string, done func(ctx context.Context) (bool, error)) error {
	if err := wait.PollUntilContextTimeout(g.ctx, 100*time.Millisecond, 30*time.Second, true, done); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// granted is done once the plane's one grant is in state and its policy has want rules.
func (g grantWalk) granted(state cpv1.GrantState, want int) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		got := &cpv1.ComputePlane{}
		if err := g.c.Get(ctx, g.key, got); err != nil {
			return false, err
		}
		n, err := g.rules(ctx)
		return len(got.Status.ServiceAccess) == 1 && got.Status.ServiceAccess[0].State == state && n == want, err
	}
}

// showAccess prints the plane's status.serviceAccess.
func (g grantWalk) showAccess() error {
	return g.kubectl("get", "computeplane", "-n", g.key.Namespace, g.key.Name, "-o", grantAccess)
}

func (g grantWalk) pending() error {
	if err := g.kubectl("create", "service", "clusterip", "postgres", "-n", g.key.Namespace, "--tcp=5432:5432"); err != nil {
		return err
	}
	if err := g.await("a Service that has not opted in must open nothing", g.granted(cpv1.GrantPending, -1)); err != nil {
		return err
	}
	if err := g.showAccess(); err != nil {
		return err
	}
	fmt.Println("    (pending, and no grant policy: the Service's owner has not agreed)")
	return nil
}

func (g grantWalk) tenantCannotOptIn() error {
	step("...the tenant (alice, here allowed to edit the namespace's Services, as the built-in edit role allows) cannot opt it in itself: that is the Service owner's right (computeplane-service-access)")
	ns := g.key.Namespace
	if err := g.kubectl("create", "role", "service-editor", "-n", ns, "--verb=get,list,patch,update", "--resource=services"); err != nil {
		return err
	}
	if err := g.kubectl("create", "rolebinding", "alice-services", "-n", ns, "--role=service-editor", "--user=alice"); err != nil {
		return err
	}
	// Refused by RBAC would prove nothing: wait until alice may edit the Service.
	if err := g.await("alice was not allowed to edit Services", func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Resource: "services", Name: "postgres"}}}
		if err := g.c.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	}); err != nil {
		return err
	}
	if err := refused(g.kubectl("--as=alice", "label", "service", "postgres", "-n", ns, cpv1.ServiceAccessLabel+"="+g.key.Name)); err != nil {
		return fmt.Errorf("the tenant opting its own Service in: %w", err)
	}
	return nil
}

func (g grantWalk) ownerOptsIn() error {
	step("...its owner (the cluster admin here, standing for the platform) opts in: the grant policy opens exactly the Service's backends on 5432/TCP")
	if err := g.kubectl("label", "service", "postgres", "-n", g.key.Namespace, cpv1.ServiceAccessLabel+"="+g.key.Name); err != nil {
		return err
	}
	if err := g.await("the opted-in Service was not granted", g.granted(cpv1.GrantGranted, 1)); err != nil {
		return err
	}
	if err := g.showAccess(); err != nil {
		return err
	}
	return g.kubectl("get", "ciliumnetworkpolicy", "-n", g.policy.Namespace, g.policy.Name, "-o",
		`jsonpath=egress: {.spec.egress}{"\n"}egressDeny: {.spec.egressDeny}{"\n"}`)
}

func (g grantWalk) ownerOptsOut() error {
	step("...and opts out: revoked at once")
	if err := g.kubectl("label", "service", "postgres", "-n", g.key.Namespace, cpv1.ServiceAccessLabel+"-"); err != nil {
		return err
	}
	if err := g.await("a Service that opted out must be revoked", g.granted(cpv1.GrantPending, -1)); err != nil {
		return err
	}
	if err := g.showAccess(); err != nil {
		return err
	}
	fmt.Println("    (revoked: the grant policy is gone)")
	return nil
}
