package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/remote/posture"
)

// Flux's helm-controller labels every object a HelmRelease renders, its hooks' included
// (Helm 4 post-renders them together unless the release asks otherwise, which placement
// releases may not), with the release's name and namespace.
const (
	fluxOriginName      = "helm.toolkit.fluxcd.io/name"
	fluxOriginNamespace = "helm.toolkit.fluxcd.io/namespace"
)

// ErrNotConnected says the operator holds no answering connection to the plane.
var ErrNotConnected = errors.New("the operator has no answering connection to the plane")

// Leftovers removes from planes what an uninstalled placement release left in them.
type Leftovers struct {
	Planes *ClusterCache
}

// Sweep deletes, in the plane's target namespaces and as the release's deployer, every
// object a deployer may create that carries the release's Flux origin labels: after
// Flux's uninstall, what remains is what the chart kept (helm.sh/resource-policy: keep)
// and what its hooks created, which Helm never tracks. Acting as the deployer, it can
// delete nothing the release could not have written; each delete is preconditioned on
// the object listed, and propagates in the background (a kept Deployment's pods go
// too). Any refusal is an error: the deployer may list all of these in every target
// namespace, unless its identities drifted, and then nothing is known. It returns how
// many objects it deleted.
func (l *Leftovers) Sweep(ctx context.Context, plane, release types.NamespacedName, targets []string) (int, error) {
	p, ok := l.Planes.Existing(ctx, plane)
	if !ok {
		return 0, ErrNotConnected
	}
	md, err := p.metadataAs("system:serviceaccount:" + release.Namespace + ":" + cpv1.DeployerName)
	if err != nil {
		return 0, err
	}
	selector := labels.SelectorFromSet(labels.Set{fluxOriginName: release.Name, fluxOriginNamespace: release.Namespace}).String()
	background := metav1.DeletePropagationBackground
	deleted := 0
	for _, ns := range targets {
		for _, gvr := range posture.DeployerWritable() {
			res := md.Resource(gvr).Namespace(ns)
			opts := metav1.ListOptions{LabelSelector: selector, Limit: 500}
			for {
				list, err := res.List(ctx, opts)
				if err != nil {
					l.Planes.Failed(plane, err)
					return deleted, fmt.Errorf("listing %s in %s: %w", gvr.Resource, ns, err)
				}
				for _, o := range list.Items {
					err := res.Delete(ctx, o.Name, metav1.DeleteOptions{
						PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &o.UID}})
					switch {
					case err == nil:
						deleted++
					case apierrors.IsNotFound(err), apierrors.IsConflict(err):
						// Gone already, or another object by that name since.
					default:
						return deleted, fmt.Errorf("deleting %s %s/%s: %w", gvr.Resource, ns, o.Name, err)
					}
				}
				if list.Continue == "" {
					break
				}
				opts.Continue = list.Continue
			}
		}
	}
	return deleted, nil
}

// metadataAs is a metadata client that impersonates user, on the plane's connection.
func (p *Plane) metadataAs(user string) (metadata.Interface, error) {
	base := p.conn.clientHTTP
	as := &http.Client{
		Transport: transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{UserName: user}, base.Transport),
		Timeout:   base.Timeout,
	}
	return metadata.NewForConfigAndClient(rest.CopyConfig(p.conn.clientConfig), as)
}
