package controllers

import (
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// checkAgainstClass returns every way a plane's curated knobs exceed what its class
// allows. The CRD schema checks each field on its own; only this check knows the class.
func checkAgainstClass(spec *cpv1.ComputePlaneSpec, class *cpv1.ComputePlaneClassSpec) field.ErrorList {
	var errs field.ErrorList
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

func appendOver(errs field.ErrorList, p *field.Path, v resource.Quantity, ceiling *resource.Quantity, name string) field.ErrorList {
	if ceiling != nil && v.Cmp(*ceiling) > 0 {
		errs = append(errs, field.Invalid(p, v.String(), "exceeds the class's nodeGroups."+name+" ("+ceiling.String()+")"))
	}
	return errs
}

func exceeds(what string, limit int32) string {
	return "exceeds " + what + " (" + resource.NewQuantity(int64(limit), resource.DecimalSI).String() + ")"
}
