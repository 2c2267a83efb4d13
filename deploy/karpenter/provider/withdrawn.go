package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"sigs.k8s.io/karpenter/pkg/cloudprovider"
)

const (
	// The label of the ConfigMaps that withdraw offerings; any namespace.
	withdrawnLabel = "ksim.io/withdrawn-offerings"
	// The ConfigMap's key: a JSON array of withdrawals.
	withdrawnKey = "withdrawn"
)

// A withdrawal: the offerings of one NodePool that match every field given (an empty field
// matches any value) cannot be launched until it is taken back.
type withdrawal struct {
	NodePool     string `json:"nodePool"`
	InstanceType string `json:"instanceType,omitempty"`
	Zone         string `json:"zone,omitempty"`
	CapacityType string `json:"capacityType,omitempty"`
	// Why, for the error Karpenter logs and publishes.
	Reason string `json:"reason,omitempty"`
}

func (w withdrawal) matches(instanceType string, offering *cloudprovider.Offering) bool {
	return (w.InstanceType == "" || w.InstanceType == instanceType) &&
		(w.Zone == "" || w.Zone == offering.Zone()) &&
		(w.CapacityType == "" || w.CapacityType == offering.CapacityType())
}

// The withdrawals of every labelled ConfigMap, by NodePool, kept current by an informer.
type withdrawn struct {
	mu     sync.RWMutex
	byPool map[string][]withdrawal
}

func watchWithdrawn(ctx context.Context, client kubernetes.Interface) (*withdrawn, error) {
	w := &withdrawn{byPool: map[string][]withdrawal{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(options *metav1.ListOptions) {
			options.LabelSelector = withdrawnLabel
		}))
	configMaps := factory.Core().V1().ConfigMaps()
	informer := configMaps.Informer()
	refresh := func(any) { w.refresh(ctx, configMaps.Lister().List) }
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    refresh,
		UpdateFunc: func(_, object any) { refresh(object) },
		DeleteFunc: refresh,
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for kind, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return nil, fmt.Errorf("the %v informer did not sync", kind)
		}
	}
	return w, nil
}

// refresh rebuilds the withdrawals from every ConfigMap; one that does not parse is logged and
// left out, the others still count.
func (w *withdrawn) refresh(ctx context.Context, list func(labels.Selector) ([]*corev1.ConfigMap, error)) {
	configMaps, err := list(labels.Everything())
	if err != nil {
		log.FromContext(ctx).Error(err, "listing withdrawn offerings")
		return
	}
	byPool := map[string][]withdrawal{}
	for _, configMap := range configMaps {
		var given []withdrawal
		if err := json.Unmarshal([]byte(configMap.Data[withdrawnKey]), &given); err != nil {
			log.FromContext(ctx).Error(err, "withdrawn offerings ignored",
				"configmap", configMap.Namespace+"/"+configMap.Name)
			continue
		}
		for _, withdrawal := range given {
			if withdrawal.NodePool != "" {
				byPool[withdrawal.NodePool] = append(byPool[withdrawal.NodePool], withdrawal)
			}
		}
	}
	w.mu.Lock()
	w.byPool = byPool
	w.mu.Unlock()
	log.FromContext(ctx).Info("withdrawn offerings", "nodePools", len(byPool))
}

// of returns the withdrawals of a NodePool.
func (w *withdrawn) of(nodePool string) []withdrawal {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.byPool[nodePool]
}

// why is the reasons of the withdrawals, for an error.
func why(withdrawals []withdrawal) string {
	reasons := map[string]bool{}
	for _, withdrawal := range withdrawals {
		if withdrawal.Reason != "" {
			reasons[withdrawal.Reason] = true
		}
	}
	sorted := make([]string, 0, len(reasons))
	for reason := range reasons {
		sorted = append(sorted, reason)
	}
	sort.Strings(sorted)
	return strings.Join(sorted, ", ")
}
