package computeplane

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// checkAgainstClass returns every way a plane's curated knobs exceed what its class
// allows. The CRD schema checks each field on its own; only this check knows the class
// (and the plane's namespace, which names a placement namespace too).
func checkAgainstClass(namespace string, spec *cpv1.ComputePlaneSpec, class *cpv1.ComputePlaneClassSpec) field.ErrorList {
	errs := checkPlacementNamespaces(namespace, spec, class)
	limits := &class.NodeGroups
	groups := field.NewPath("spec", "nodeGroups")

	if n := int32(len(spec.NodeGroups)); n > limits.MaxGroups {
		errs = append(errs, field.TooMany(groups, int(n), int(limits.MaxGroups)))
	}

	names := make([]string, 0, len(spec.NodeGroups))
	for name := range spec.NodeGroups {
		names = append(names, name)
	}
	sort.Strings(names) // stable messages

	allowedGPUs := map[string]int32{}
	for _, g := range limits.GPUs {
		allowedGPUs[g.DeviceName] = g.MaxPerNode
	}

	for _, name := range names {
		ng := spec.NodeGroups[name]
		p := groups.Key(name)
		if ng.MaxReplicas > limits.MaxReplicas {
			errs = append(errs, field.Invalid(p.Child("maxReplicas"), ng.MaxReplicas,
				exceeds("the class's nodeGroups.maxReplicas", limits.MaxReplicas)))
		}
		if ng.InstanceType != "" && !slices.Contains(limits.InstanceTypes, ng.InstanceType) {
			errs = append(errs, field.NotSupported(p.Child("instanceType"), ng.InstanceType, limits.InstanceTypes))
		}
		if r := ng.Resources; r != nil {
			errs = appendOver(errs, p.Child("resources", "cpu"), r.CPU, limits.MaxCPU, "maxCPU")
			errs = appendOver(errs, p.Child("resources", "memory"), r.Memory, limits.MaxMemory, "maxMemory")
		}
		if ng.DiskSize != nil {
			errs = appendOver(errs, p.Child("diskSize"), *ng.DiskSize, limits.MaxDiskSize, "maxDiskSize")
		}
		for i, g := range ng.GPUs {
			gp := p.Child("gpus").Index(i)
			maxPerNode, ok := allowedGPUs[g.DeviceName]
			switch {
			case !ok:
				errs = append(errs, field.Forbidden(gp.Child("deviceName"),
					"GPU "+g.DeviceName+" is not allowed by the class (nodeGroups.gpus)"))
			case g.Count > maxPerNode:
				errs = append(errs, field.Invalid(gp.Child("count"), g.Count,
					exceeds("the class's maxPerNode for "+g.DeviceName, maxPerNode)))
			}
		}
	}
	return errs
}

// checkPlacementNamespaces refuses placement namespaces where the deployer must not
// get rights: system namespaces, the operator's own, the class's Pod Security exempt
// namespaces (pod hardening does not apply there) and its add-ons' target namespaces
// (their service accounts are trusted like the operator). The plane's own namespace
// name is a placement namespace too.
func checkPlacementNamespaces(namespace string, spec *cpv1.ComputePlaneSpec, class *cpv1.ComputePlaneClassSpec) field.ErrorList {
	reserved := map[string]string{}
	for _, a := range class.Addons {
		reserved[a.TargetNamespace] = "is add-on " + a.Name + "'s target namespace"
	}
	for _, n := range class.PodSecurity.ExemptNamespaces {
		reserved[n] = "is exempt from Pod Security in the class"
	}
	why := func(n string) string {
		switch {
		case reserved[n] != "":
			return reserved[n]
		case n == "default" || strings.HasPrefix(n, "kube-"):
			return "is a Kubernetes system namespace"
		case strings.HasPrefix(n, "computeplane-"):
			return "is reserved for the operator"
		}
		return ""
	}
	var errs field.ErrorList
	if w := why(namespace); w != "" {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "namespace"),
			fmt.Sprintf("%s is also the plane's placement namespace, and %s; create the ComputePlane in another namespace", namespace, w)))
	}
	for i, n := range spec.PlacementNamespaces {
		if w := why(n); w != "" {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "placementNamespaces").Index(i),
				fmt.Sprintf("%s %s; the deployer must not get rights there", n, w)))
		}
	}
	return errs
}

func appendOver(errs field.ErrorList, p *field.Path, v resource.Quantity, ceiling *resource.Quantity, name string) field.ErrorList {
	if ceiling != nil && v.Cmp(*ceiling) > 0 {
		errs = append(errs, field.Invalid(p, v.String(), "exceeds the class's nodeGroups."+name+" ("+ceiling.String()+")"))
	}
	return errs
}

func exceeds(what string, limit int32) string {
	return "exceeds " + what + " (" + resource.NewQuantity(int64(limit), resource.DecimalSI).String() + ")"
}
