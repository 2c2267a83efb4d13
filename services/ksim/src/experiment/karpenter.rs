//! Karpenter's instance types in an experiment. Karpenter offers them from its start, so they
//! belong to the environment, not to a run: a run on a cluster starts its own environment with
//! the file's `instanceTypes` priced by the variant's `providerConfig`, and a local experiment
//! checks, before anything runs, that the environment `ksim up` started offers the same. The
//! same file then gives the same runs either way.

use std::path::{Path, PathBuf};

use anyhow::Context;
use ksim_experiment::experiment::{Experiment, Variant};
use ksim_nodes::karpenter::InstanceType;

use ksim_localenv::environment::{
    instance_types::{MAX_CONFIG_BYTES, instance_types_of},
    state::{EnvState, state_dir},
};

use crate::driver::DriverArgs;

/// What a variant's environment starts Karpenter with.
pub struct KarpenterFiles {
    /// The node skeletons of its instance types; none: the KWOK provider's built-in list.
    pub skeletons: Vec<PathBuf>,
    /// The provider configuration that prices them.
    pub provider_config: Option<PathBuf>,
}

/// A variant's [`KarpenterFiles`], each file found by `path`; `None` for a variant without
/// NodePools.
pub fn files(
    experiment: &Experiment,
    variant: &Variant,
    path: &dyn Fn(&str) -> PathBuf,
) -> Option<KarpenterFiles> {
    if variant.node_pools_in(experiment).is_empty() {
        return None;
    }
    Some(KarpenterFiles {
        skeletons: experiment.instance_types.iter().map(|f| path(f)).collect(),
        provider_config: variant.provider_config_in(experiment).map(path),
    })
}

/// The instance types a variant's Karpenter offers, priced, read as `ksim up --karpenter
/// --instance-type ... --provider-config ...` reads them; `None` for a variant without NodePools.
pub fn instance_types(
    experiment: &Experiment,
    variant: &Variant,
    path: &dyn Fn(&str) -> PathBuf,
) -> anyhow::Result<Option<Vec<InstanceType>>> {
    let Some(files) = files(experiment, variant, path) else {
        return Ok(None);
    };
    let provider = files
        .provider_config
        .as_deref()
        .map(|path| {
            crate::files::read_text_bounded(path, MAX_CONFIG_BYTES, "the provider config")
                .map(|yaml| (path.display().to_string(), yaml))
        })
        .transpose()?;
    let types = instance_types_of(
        &files.skeletons,
        provider
            .as_ref()
            .map(|(source, yaml)| (source.as_str(), yaml.as_str())),
    )?;
    Ok(Some(types))
}

/// A local experiment's Karpenter variants run on the Karpenter `ksim up` started, which offers
/// what it was started with: refused unless that is what the file asks, as a run on a cluster
/// would get it. Unknown for an environment named only by `--driver`.
pub fn check_environment(
    experiment: &Experiment,
    base: &Path,
    driver: &DriverArgs,
) -> anyhow::Result<()> {
    if driver.url.is_some() {
        return Ok(());
    }
    let Some(state) = state_dir()
        .ok()
        .and_then(|dir| EnvState::read(&dir).ok().flatten())
    else {
        return Ok(());
    };
    // Without Karpenter, a variant of NodePools is refused by the run itself, which says so.
    let Some(running) = state.karpenter_instance_types else {
        return Ok(());
    };
    for variant in &experiment.variants {
        let wanted = instance_types(experiment, variant, &|file| base.join(file))
            .with_context(|| format!("variant {}", variant.name))?;
        if let Some(wanted) = wanted {
            check_same(&variant.name, &wanted, &running)?;
        }
    }
    Ok(())
}

/// Refuses a Karpenter variant whose instance types (`wanted`) are not the ones the
/// environment's Karpenter offers (`running`).
pub fn check_same(
    variant: &str,
    wanted: &[InstanceType],
    running: &[InstanceType],
) -> anyhow::Result<()> {
    if wanted == running {
        return Ok(());
    }
    let (wanted_text, running_text) = (describe(wanted), describe(running));
    let how = if wanted_text == running_text {
        " (same names and prices, other capacities)"
    } else {
        ""
    };
    anyhow::bail!(
        "variant {variant}: the experiment offers Karpenter {wanted_text}, but the environment's \
         Karpenter offers {running_text}{how}; start it with `ksim up --karpenter` and the \
         file's instanceTypes as --instance-type, its providerConfig as --provider-config"
    )
}

/// Instance types as a user reads them: names and prices, or the built-in list.
fn describe(types: &[InstanceType]) -> String {
    if types.is_empty() {
        return "the KWOK provider's built-in instance types".to_owned();
    }
    let each: Vec<String> = types
        .iter()
        .map(|t| match t.offerings.first() {
            Some(offering) => format!("{} at {}/h", t.name, offering.price),
            None => t.name.clone(),
        })
        .collect();
    each.join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use ksim_nodes::{karpenter, pricing::Pricing, skeleton::NodeSkeleton};

    use super::*;

    fn types(cpu: &str, price: f64) -> Vec<InstanceType> {
        let skeleton = NodeSkeleton::from_yaml(&format!(
            "metadata:\n  labels:\n    node.kubernetes.io/instance-type: m5.large\n\
             status:\n  capacity: {{cpu: \"{cpu}\", memory: 8Gi, pods: \"29\"}}\n"
        ))
        .unwrap();
        karpenter::instance_types(
            &[skeleton],
            &Pricing {
                instance_types: BTreeMap::from([("m5.large".to_owned(), price)]),
                ..Pricing::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn only_the_same_types_at_the_same_prices_pass() {
        assert!(check_same("k", &types("2", 0.096), &types("2", 0.096)).is_ok());
        assert!(check_same("k", &[], &[]).is_ok());
        let cases = [
            (
                types("2", 0.096),
                types("2", 0.1),
                "m5.large at 0.096/h",
                "m5.large at 0.1/h",
            ),
            (
                types("2", 0.096),
                Vec::new(),
                "m5.large at 0.096/h",
                "built-in",
            ),
            (
                Vec::new(),
                types("2", 0.096),
                "built-in",
                "m5.large at 0.096/h",
            ),
            (
                types("2", 0.096),
                types("4", 0.096),
                "m5.large at 0.096/h",
                "other capacities",
            ),
        ];
        for (wanted, running, first, second) in cases {
            let error = check_same("k", &wanted, &running).unwrap_err().to_string();
            assert!(error.starts_with("variant k: "), "{error}");
            let (a, b) = (error.find(first).unwrap(), error.rfind(second).unwrap());
            assert!(a < b, "{error}");
            assert!(error.contains("--instance-type"), "{error}");
        }
    }
}
