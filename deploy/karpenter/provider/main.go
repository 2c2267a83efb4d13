// Karpenter with the KWOK cloud provider of its release, as ksim runs it: the provider's
// offerings can be withdrawn for a while, per NodePool, by the simulation that owns the
// NodePool (a zone outage, a stockout), as a cloud's capacity comes and goes. The stock
// provider marks every offering available once, when it loads its instance types.
package main

import (
	"sigs.k8s.io/controller-runtime/pkg/log"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"
)

func main() {
	ctx, op := operator.NewOperator()
	instanceTypes, err := kwok.ConstructInstanceTypes(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed constructing instance types")
	}
	withdrawn, err := watchWithdrawn(ctx, op.KubernetesInterface)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed watching withdrawn offerings")
		panic(err)
	}
	provider := &cloudProvider{
		CloudProvider: kwok.NewCloudProvider(ctx, op.GetClient(), instanceTypes),
		instanceTypes: instanceTypes,
		withdrawn:     withdrawn,
	}
	decorated := overlay.Decorate(provider, op.GetClient(), op.InstanceTypeStore)
	clusterState := state.NewCluster(op.Clock, op.GetClient(), decorated)
	op.
		WithControllers(ctx, controllers.NewControllers(
			ctx,
			op.Manager,
			op.Clock,
			op.GetClient(),
			op.EventRecorder,
			decorated,
			provider,
			clusterState,
			op.InstanceTypeStore,
		)...).Start(ctx)
}
