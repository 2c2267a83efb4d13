package main

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

const (
	// explainAnnotation asks for a pod's explanation: "all", or N to explain at most N pods
	// of the pod's controller (the first N it sees; a pod without one counts alone).
	explainAnnotation = "ksim.dev/explain"
	// explanationAnnotation is where the explanation goes (JSON, see explanation).
	explanationAnnotation = "ksim.dev/scheduling-explanation"
	attemptKey            = fwk.StateKey("ksim.dev/explain")

	// Bounds of one pod's explanation, so that a pod stays well within the annotations' 256 KiB
	// at any cluster size: the last attempts, the largest groups of rejected nodes, a few of
	// their names, and the chosen node's scores beside its closest runners-up.
	maxAttempts     = 3
	maxRejections   = 8
	maxExamples     = 3
	maxScored       = 4
	maxReasonLength = 240
	// Explanations waiting to be written, per lane; beyond it one is dropped (and logged),
	// never waited for: the scheduling loop must not wait on the API.
	queueLength = 1024
	// Patches in flight at once: one lane wrote about 90 a second on 2 cores against the
	// scheduler's 200 bindings (docs/benchmarks.md).
	writeLanes = 8
	// Pods whose last explanation a lane remembers; beyond it, it starts again.
	maxRemembered = 10_000
	// Workloads whose explained pods are counted; beyond it the counts start again (a
	// workload may then have N more pods explained), so that a long run's memory stays bounded.
	maxOwners = 100_000
)

// explanation is the annotation's value: a pod's last scheduling attempts, oldest first.
type explanation struct {
	Attempts []attemptRecord `json:"attempts"`
}

// attemptRecord is one scheduling attempt: the node chosen, or none and why.
type attemptRecord struct {
	Time string `json:"time"`
	// Node is the node chosen ("" when none was).
	Node string `json:"node,omitempty"`
	// Nodes the scheduler knew; Feasible passed every filter; the rest were rejected
	// (Rejected) or not evaluated (the scheduler stops once it has enough feasible nodes,
	// percentageOfNodesToScore).
	Nodes    int `json:"nodes"`
	Feasible int `json:"feasible"`
	// Rejected groups the nodes by the filter plugin that rejected them and its reason,
	// largest group first.
	Rejected []rejection `json:"rejected,omitempty"`
	// Scores of the chosen node and its closest runners-up, highest total first: each score
	// plugin's normalized score times its weight, as the scheduler added them.
	Scores []nodeScores `json:"scores,omitempty"`
	// Message says why no node was chosen, or what failed after one was.
	Message string `json:"message,omitempty"`
}

type rejection struct {
	Plugin   string   `json:"plugin"`
	Reason   string   `json:"reason"`
	Nodes    int      `json:"nodes"`
	Examples []string `json:"examples"`
}

type nodeScores struct {
	Node    string           `json:"node"`
	Total   int64            `json:"total"`
	Plugins map[string]int64 `json:"plugins"`
}

// attempt gathers one scheduling cycle's results, kept in its CycleState. Filters run on
// several goroutines at once.
type attempt struct {
	mu       sync.Mutex
	rejected map[string]*fwk.Status
	feasible int
	scores   []fwk.NodePluginScores
}

// Clone shares the attempt: a clone of the cycle's state (preemption's dry runs) runs the
// framework's own plugins, never this wrapper, so it adds nothing to it.
func (a *attempt) Clone() fwk.StateData { return a }

func attemptOf(state fwk.CycleState) *attempt {
	data, err := state.Read(attemptKey)
	if err != nil {
		return nil
	}
	a, _ := data.(*attempt)
	return a
}

// explaining is a profile's framework, recording the extension points a scheduling cycle
// runs for the pods asked for. Every result is the wrapped framework's, returned unchanged.
type explaining struct {
	framework.Framework
	writer *writer
}

func (e *explaining) RunPreFilterPlugins(ctx context.Context, state fwk.CycleState, pod *v1.Pod) (*fwk.PreFilterResult, *fwk.Status, sets.Set[string]) {
	if e.writer.wants(pod) {
		state.Write(attemptKey, &attempt{rejected: map[string]*fwk.Status{}})
	}
	return e.Framework.RunPreFilterPlugins(ctx, state, pod)
}

func (e *explaining) RunFilterPluginsWithNominatedPods(ctx context.Context, state fwk.CycleState, pod *v1.Pod, info fwk.NodeInfo) *fwk.Status {
	status := e.Framework.RunFilterPluginsWithNominatedPods(ctx, state, pod, info)
	if a := attemptOf(state); a != nil {
		a.mu.Lock()
		if status.IsSuccess() {
			a.feasible++
		} else {
			a.rejected[info.Node().Name] = status
		}
		a.mu.Unlock()
	}
	return status
}

func (e *explaining) RunScorePlugins(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) ([]fwk.NodePluginScores, *fwk.Status) {
	scores, status := e.Framework.RunScorePlugins(ctx, state, pod, nodes)
	if a := attemptOf(state); a != nil && status.IsSuccess() {
		a.mu.Lock()
		a.scores = scores
		a.mu.Unlock()
	}
	return scores, status
}

func (e *explaining) RunReservePluginsReserve(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeName string) *fwk.Status {
	status := e.Framework.RunReservePluginsReserve(ctx, state, pod, nodeName)
	if a := attemptOf(state); a != nil {
		a.mu.Lock()
		record := attemptRecord{
			Time:     time.Now().UTC().Format(time.RFC3339Nano),
			Node:     nodeName,
			Nodes:    e.nodeCount(),
			Feasible: a.feasible,
			Rejected: group(a.rejected),
			Scores:   topScores(a.scores, nodeName),
		}
		a.mu.Unlock()
		if !status.IsSuccess() {
			record.Node = ""
			record.Message = fmt.Sprintf("reserving %s failed: %s", nodeName, clip(status.Message()))
		}
		e.writer.send(pod, record)
	}
	return status
}

// RunPostFilterPlugins runs when no node passed the filters: every node was evaluated, and
// the map the scheduler hands its PostFilter plugins has each node's rejection (a PreFilter
// rejection stands for all of them).
func (e *explaining) RunPostFilterPlugins(ctx context.Context, state fwk.CycleState, pod *v1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if a := attemptOf(state); a != nil {
		rejected := map[string]*fwk.Status{}
		nodes, err := e.SnapshotSharedLister().NodeInfos().List()
		if err == nil {
			for _, info := range nodes {
				rejected[info.Node().Name] = statuses.Get(info.Node().Name)
			}
		}
		e.writer.send(pod, attemptRecord{
			Time:     time.Now().UTC().Format(time.RFC3339Nano),
			Nodes:    len(nodes),
			Rejected: group(rejected),
			Message:  fmt.Sprintf("0/%d nodes are available", len(nodes)),
		})
	}
	return e.Framework.RunPostFilterPlugins(ctx, state, pod, statuses)
}

func (e *explaining) nodeCount() int {
	count, err := e.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return 0
	}
	return len(count)
}

// group counts the rejected nodes per plugin and reason, largest group first (then by
// plugin and reason, so that equal inputs read the same), keeping the largest groups.
func group(rejected map[string]*fwk.Status) []rejection {
	type key struct{ plugin, reason string }
	groups := map[key]*rejection{}
	names := make([]string, 0, len(rejected))
	for name := range rejected {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		status := rejected[name]
		k := key{plugin: status.Plugin(), reason: clip(strings.Join(status.Reasons(), "; "))}
		g, ok := groups[k]
		if !ok {
			g = &rejection{Plugin: k.plugin, Reason: k.reason, Examples: []string{}}
			groups[k] = g
		}
		g.Nodes++
		if len(g.Examples) < maxExamples {
			g.Examples = append(g.Examples, name)
		}
	}
	out := make([]rejection, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Nodes != out[j].Nodes {
			return out[i].Nodes > out[j].Nodes
		}
		if out[i].Plugin != out[j].Plugin {
			return out[i].Plugin < out[j].Plugin
		}
		return out[i].Reason < out[j].Reason
	})
	if len(out) > maxRejections {
		out = out[:maxRejections]
	}
	return out
}

// topScores keeps the chosen node's scores first, then the highest other totals.
func topScores(scores []fwk.NodePluginScores, chosen string) []nodeScores {
	sorted := append([]fwk.NodePluginScores(nil), scores...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if (sorted[i].Name == chosen) != (sorted[j].Name == chosen) {
			return sorted[i].Name == chosen
		}
		if sorted[i].TotalScore != sorted[j].TotalScore {
			return sorted[i].TotalScore > sorted[j].TotalScore
		}
		return sorted[i].Name < sorted[j].Name
	})
	if len(sorted) > maxScored {
		sorted = sorted[:maxScored]
	}
	out := make([]nodeScores, 0, len(sorted))
	for _, node := range sorted {
		plugins := make(map[string]int64, len(node.Scores))
		for _, score := range node.Scores {
			plugins[score.Name] = score.Score
		}
		out = append(out, nodeScores{Node: node.Name, Total: node.TotalScore, Plugins: plugins})
	}
	return out
}

func clip(s string) string {
	if len(s) <= maxReasonLength {
		return s
	}
	cut := maxReasonLength
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// writer writes explanations to their pods' status (the scheduler's own RBAC may patch
// pods/status, whose metadata changes the apiserver keeps), off the scheduling loop, on
// several lanes at once: one patch waits on the apiserver for milliseconds, and a burst of
// explained pods is scheduled faster than one lane writes. A pod always goes to the same lane,
// so its attempts are written in order.
type writer struct {
	client kubernetes.Interface
	lanes  []chan pending

	mu sync.Mutex
	// The pods explained per controller, for the ones asking for at most N.
	owners map[types.UID]sets.Set[types.UID]
}

type pending struct {
	namespace, name string
	// The pod's explanation as the scheduler saw it, which this attempt extends.
	previous string
	record   attemptRecord
}

func newWriter(client kubernetes.Interface) *writer {
	lanes := make([]chan pending, writeLanes)
	for i := range lanes {
		lanes[i] = make(chan pending, queueLength)
	}
	return &writer{client: client, lanes: lanes, owners: map[types.UID]sets.Set[types.UID]{}}
}

// wants says whether to explain pod: it asks, and its controller's pods explained so far
// leave room for it.
func (w *writer) wants(pod *v1.Pod) bool {
	asked, ok := pod.Annotations[explainAnnotation]
	if !ok {
		return false
	}
	if asked == "all" {
		return true
	}
	limit, err := strconv.Atoi(asked)
	if err != nil || limit < 1 {
		return false
	}
	owner := pod.UID
	if ref := metav1.GetControllerOf(pod); ref != nil {
		owner = ref.UID
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	pods, ok := w.owners[owner]
	if !ok {
		if len(w.owners) >= maxOwners {
			w.owners = map[types.UID]sets.Set[types.UID]{}
		}
		pods = sets.New[types.UID]()
		w.owners[owner] = pods
	}
	if pods.Has(pod.UID) {
		return true
	}
	if pods.Len() >= limit {
		return false
	}
	pods.Insert(pod.UID)
	return true
}

func (w *writer) send(pod *v1.Pod, record attemptRecord) {
	p := pending{namespace: pod.Namespace, name: pod.Name, previous: pod.Annotations[explanationAnnotation], record: record}
	lane := fnv.New32a()
	_, _ = lane.Write([]byte(pod.Namespace + "/" + pod.Name))
	select {
	case w.lanes[lane.Sum32()%uint32(len(w.lanes))] <- p:
	default:
		klog.Background().Info("explanation dropped: too many waiting to be written", "pod", klog.KObj(pod))
	}
}

func (w *writer) run(ctx context.Context) {
	for _, lane := range w.lanes {
		go w.runLane(ctx, lane)
	}
}

// runLane writes its pods' explanations in turn. What it last wrote of a pod is what the
// pod's next attempt extends, when the scheduler's copy of the pod does not have it yet.
func (w *writer) runLane(ctx context.Context, lane chan pending) {
	written := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-lane:
			key := p.namespace + "/" + p.name
			if last, ok := written[key]; ok {
				p.previous = last
			}
			if value, ok := w.write(ctx, p); ok {
				if len(written) >= maxRemembered {
					written = map[string]string{}
				}
				written[key] = value
			}
		}
	}
}

// write extends the pod's explanation with the attempt and patches it; it returns the value
// the pod has then, and whether it is known.
func (w *writer) write(ctx context.Context, p pending) (string, bool) {
	var current explanation
	// A value this writer did not write (or an older form) is replaced.
	_ = json.Unmarshal([]byte(p.previous), &current)
	if n := len(current.Attempts); n > 0 && sameOutcome(current.Attempts[n-1], p.record) {
		// A pod retried for the same reasons: written once, so that writing it does not
		// itself wake the pod for another try.
		return p.previous, true
	}
	current.Attempts = append(current.Attempts, p.record)
	if n := len(current.Attempts); n > maxAttempts {
		current.Attempts = current.Attempts[n-maxAttempts:]
	}
	value, err := json.Marshal(current)
	if err != nil {
		return "", false
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{explanationAnnotation: string(value)}},
	})
	if err != nil {
		return "", false
	}
	_, err = w.client.CoreV1().Pods(p.namespace).Patch(ctx, p.name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		klog.Background().Info("explanation not written", "pod", klog.KRef(p.namespace, p.name), "err", err)
		return "", false
	}
	return string(value), true
}

// sameOutcome: two attempts that differ only in their time.
func sameOutcome(a, b attemptRecord) bool {
	a.Time, b.Time = "", ""
	return reflect.DeepEqual(a, b)
}
