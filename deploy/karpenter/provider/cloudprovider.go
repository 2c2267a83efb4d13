package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"
)

// cloudProvider is the KWOK provider with withdrawn offerings unavailable: Karpenter's
// scheduler does not plan on them, and a launch that asks for nothing else fails with
// insufficient capacity, as a cloud's does.
type cloudProvider struct {
	cloudprovider.CloudProvider
	// The KWOK provider's own instance types, every offering available.
	instanceTypes []*cloudprovider.InstanceType
	withdrawn     *withdrawn
}

// GetInstanceTypes is the KWOK provider's, with the NodePool's withdrawn offerings
// unavailable (in copies: the provider's own stay as loaded).
func (c *cloudProvider) GetInstanceTypes(ctx context.Context, nodePool *v1.NodePool) ([]*cloudprovider.InstanceType, error) {
	instanceTypes, err := c.CloudProvider.GetInstanceTypes(ctx, nodePool)
	if err != nil || nodePool == nil {
		return instanceTypes, err
	}
	withdrawals := c.withdrawn.of(nodePool.Name)
	if len(withdrawals) == 0 {
		return instanceTypes, nil
	}
	result := make([]*cloudprovider.InstanceType, 0, len(instanceTypes))
	for _, instanceType := range instanceTypes {
		if !slices.ContainsFunc(instanceType.Offerings, func(offering *cloudprovider.Offering) bool {
			return withdrawnFrom(withdrawals, instanceType.Name, offering)
		}) {
			result = append(result, instanceType)
			continue
		}
		copied := instanceType.DeepCopy()
		for _, offering := range copied.Offerings {
			if withdrawnFrom(withdrawals, copied.Name, offering) {
				offering.Available = false
			}
		}
		result = append(result, copied)
	}
	return result, nil
}

// Create launches the cheapest offering the NodeClaim allows that is not withdrawn, as the
// KWOK provider picks the cheapest it allows: its requirements narrowed to that offering.
func (c *cloudProvider) Create(ctx context.Context, nodeClaim *v1.NodeClaim) (*v1.NodeClaim, error) {
	withdrawals := c.withdrawn.of(nodeClaim.Labels[v1.NodePoolLabelKey])
	if len(withdrawals) == 0 {
		return c.CloudProvider.Create(ctx, nodeClaim)
	}
	requirements := scheduling.NewNodeSelectorRequirementsWithMinValues(nodeClaim.Spec.Requirements...)
	allowed := requirements.Get(corev1.LabelInstanceTypeStable)
	var chosen *cloudprovider.InstanceType
	var cheapest *cloudprovider.Offering
	for _, instanceType := range c.instanceTypes {
		if !allowed.Has(instanceType.Name) {
			continue
		}
		for _, offering := range instanceType.Offerings.Available().Compatible(requirements) {
			if withdrawnFrom(withdrawals, instanceType.Name, offering) {
				continue
			}
			if cheapest == nil || offering.Price < cheapest.Price {
				chosen, cheapest = instanceType, offering
			}
		}
	}
	if cheapest == nil {
		return nil, cloudprovider.NewInsufficientCapacityError(
			fmt.Errorf("every offering the nodeclaim allows is withdrawn (%s)", why(withdrawals)))
	}
	narrowed := nodeClaim.DeepCopy()
	narrowed.Spec.Requirements = slices.DeleteFunc(narrowed.Spec.Requirements, func(r v1.NodeSelectorRequirementWithMinValues) bool {
		return r.Key == corev1.LabelInstanceTypeStable || r.Key == corev1.LabelTopologyZone || r.Key == v1.CapacityTypeLabelKey
	})
	for key, value := range map[string]string{
		corev1.LabelInstanceTypeStable: chosen.Name,
		corev1.LabelTopologyZone:       cheapest.Zone(),
		v1.CapacityTypeLabelKey:        cheapest.CapacityType(),
	} {
		if value == "" {
			return nil, errors.New("an offering without a zone or capacity type")
		}
		narrowed.Spec.Requirements = append(narrowed.Spec.Requirements, v1.NodeSelectorRequirementWithMinValues{
			Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value},
		})
	}
	return c.CloudProvider.Create(ctx, narrowed)
}

func withdrawnFrom(withdrawals []withdrawal, instanceType string, offering *cloudprovider.Offering) bool {
	return slices.ContainsFunc(withdrawals, func(w withdrawal) bool {
		return w.matches(instanceType, offering)
	})
}
