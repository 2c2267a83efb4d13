// Command ksim-scheduler is kube-scheduler with ksim's explain layer: for each pod annotated
// ksim.dev/explain, it writes why the pod went where it did (or nowhere) to the pod's
// ksim.dev/scheduling-explanation annotation. Every plugin, flag and configuration is
// kube-scheduler's own, built from the same module; a pod without the annotation is scheduled
// exactly as the stock binary schedules it.
//
// The command is kube-scheduler's, put together from the exported parts of
// k8s.io/kubernetes/cmd/kube-scheduler/app: between Setup and Run, each profile's framework
// is wrapped (explain.go). kube-scheduler's own command offers no hook there.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

func main() {
	opts := options.NewOptions()
	cmd := &cobra.Command{
		Use:  "ksim-scheduler",
		Long: "kube-scheduler with ksim's explain layer (pods annotated " + explainAnnotation + ").",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return opts.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd, opts)
		},
		Args: cobra.NoArgs,
	}
	flags := opts.Flags
	verflag.AddFlags(flags.FlagSet("global"))
	globalflag.AddGlobalFlags(flags.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, set := range flags.FlagSets {
		cmd.Flags().AddFlagSet(set)
	}
	os.Exit(cli.Run(cmd))
}

func run(cmd *cobra.Command, opts *options.Options) error {
	verflag.PrintAndExitIfRequested()
	gates := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(opts.Logs, gates); err != nil {
		return fmt.Errorf("logging: %w", err)
	}
	cliflag.PrintFlags(cmd.Flags())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-server.SetupSignalHandler()
		cancel()
	}()

	completed, scheduler, err := app.Setup(ctx, opts)
	if err != nil {
		return err
	}
	// The writer's own client, at the scheduler's rate but with a limiter of its own: writing
	// explanations never takes from the budget bindings are made with.
	client, err := kubernetes.NewForConfig(rest.CopyConfig(completed.KubeConfig))
	if err != nil {
		return fmt.Errorf("the explanations' client: %w", err)
	}
	writer := newWriter(client)
	writer.run(ctx)
	for name, framework := range scheduler.Profiles {
		scheduler.Profiles[name] = &explaining{Framework: framework, writer: writer}
	}
	return app.Run(ctx, completed, scheduler)
}
