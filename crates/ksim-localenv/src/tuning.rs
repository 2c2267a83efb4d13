//! Settings that fit the control plane to a simulation rather than to production: nothing in
//! a simulated cluster needs to survive a power cut, no kubelet asks for certificates, no
//! cloud routes traffic, and every client is trusted. Each setting is a named group of flags,
//! so that a benchmark can measure it alone (`docs/benchmarks-archive.md`, "A control plane tuned
//! for simulation" gives each one's measured effect). The local environment runs all of them
//! ([`Tuning::simulation`]); that page says why each is kept, including the one that showed no
//! effect at the size measured.

use std::{collections::BTreeSet, fmt, str::FromStr};

/// One named group of component flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Setting {
    /// etcd never fsyncs: a simulated cluster is thrown away, not recovered.
    EtcdNoFsync,
    /// etcd's data directory on tmpfs (`/dev/shm`), so writes never reach a disk.
    EtcdInMemory,
    /// etcd's backend quota at 8 GiB instead of 2 GiB: 100,000 pods and their history fit.
    EtcdQuota,
    /// kube-apiserver's concurrency 3,000 reads + 1,000 writes instead of 400 + 200.
    ApiserverInflight,
    /// Admission plugins a simulation never needs switched off (PodSecurity: virtual pods run
    /// nothing; certificate, ingress and storage plugins: nothing asks for them).
    ApiserverAdmission,
    /// kube-controller-manager's controllers for kubelets, clouds, volumes and certificates
    /// switched off: virtual nodes have no volumes to attach, no routes, no CSRs.
    Controllers,
    /// kube-controller-manager and kube-scheduler at 5,000 QPS (burst 10,000) instead of
    /// client-go's 20-50, so that their own throttles never set the pace.
    ClientQps,
    /// Virtual nodes hold [`NODE_LEASE_SECONDS`] leases instead of a kubelet's 40 s, and the
    /// node lifecycle controller waits [`NODE_MONITOR_GRACE_SECONDS`] for a renewal: a pool
    /// renews a quarter as often as a kubelet, which at 10,000 nodes is 1,000 writes a second
    /// less. Nothing in a simulation waits for a node to be found dead: the driver deletes
    /// nodes when the trace does.
    NodeLeases,
}

/// The lease a virtual node holds under [`Setting::NodeLeases`]; renewed every quarter of it.
pub const NODE_LEASE_SECONDS: u32 = 160;

/// kube-controller-manager's `--node-monitor-grace-period` under [`Setting::NodeLeases`]: the
/// lease and one renewal more, as a kubelet's 40 s leases have 50 s.
pub const NODE_MONITOR_GRACE_SECONDS: u32 = 200;

// The pool renews every quarter lease; the grace period must outlast the lease itself.
const _: () = assert!(NODE_MONITOR_GRACE_SECONDS > NODE_LEASE_SECONDS);

impl Setting {
    pub const ALL: [Self; 8] = [
        Self::EtcdNoFsync,
        Self::EtcdInMemory,
        Self::EtcdQuota,
        Self::ApiserverInflight,
        Self::ApiserverAdmission,
        Self::Controllers,
        Self::ClientQps,
        Self::NodeLeases,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::EtcdNoFsync => "etcd-no-fsync",
            Self::EtcdInMemory => "etcd-in-memory",
            Self::EtcdQuota => "etcd-quota",
            Self::ApiserverInflight => "apiserver-inflight",
            Self::ApiserverAdmission => "apiserver-admission",
            Self::Controllers => "controllers",
            Self::ClientQps => "client-qps",
            Self::NodeLeases => "node-leases",
        }
    }

    /// The flags this setting adds to `component` (`etcd`, `kube-apiserver`, ...).
    pub fn flags(self, component: &str) -> &'static [&'static str] {
        match (self, component) {
            (Self::EtcdNoFsync, "etcd") => &["--unsafe-no-fsync=true"],
            (Self::EtcdQuota, "etcd") => &["--quota-backend-bytes=8589934592"],
            (Self::ApiserverInflight, "kube-apiserver") => &[
                // Both at 0 would be refused while API Priority and Fairness is on; their sum
                // is the concurrency it shares out.
                "--max-requests-inflight=3000",
                "--max-mutating-requests-inflight=1000",
            ],
            (Self::ApiserverAdmission, "kube-apiserver") => &[DISABLED_ADMISSION_PLUGINS],
            (Self::Controllers, "kube-controller-manager") => &[CONTROLLERS],
            // Keep in step with [`Tuning::client_rate`].
            (Self::ClientQps, "kube-controller-manager" | "kube-scheduler") => {
                &["--kube-api-qps=5000", "--kube-api-burst=10000"]
            }
            // Keep in step with NODE_MONITOR_GRACE_SECONDS.
            (Self::NodeLeases, "kube-controller-manager") => &["--node-monitor-grace-period=200s"],
            _ => &[],
        }
    }
}

/// Plugins on by default that act on nothing a simulation creates, or on pods that run
/// nothing. Kept: those that change what is admitted or how it schedules (LimitRanger,
/// ResourceQuota, Priority, ServiceAccount, the webhooks and admission policies, tolerations).
const DISABLED_ADMISSION_PLUGINS: &str = "--disable-admission-plugins=PodSecurity,\
CertificateApproval,CertificateSigning,CertificateSubjectRestriction,ClusterTrustBundleAttest,\
DefaultIngressClass,DefaultStorageClass,PersistentVolumeClaimResize,\
StorageObjectInUseProtection";

/// Everything on by default except controllers that serve kubelets, clouds, volumes and
/// certificates. Kept: workloads, garbage collection, namespaces, node lifecycle and taint
/// eviction, disruption budgets, quotas, service accounts, endpoints, HPA, PV binding, and the
/// resource claim controller (a pod's ResourceClaims made from its templates, for DRA).
const CONTROLLERS: &str = "--controllers=*,\
-persistentvolume-attach-detach-controller,\
-ttl-controller,\
-node-ipam-controller,\
-node-route-controller,\
-service-lb-controller,\
-cloud-node-lifecycle-controller,\
-certificatesigningrequest-approving-controller,\
-certificatesigningrequest-cleaner-controller,\
-certificatesigningrequest-signing-controller,\
-root-ca-certificate-publisher-controller,\
-ephemeral-volume-controller,\
-endpointslice-mirroring-controller,\
-storage-version-migrator-controller,\
-kube-apiserver-serving-clustertrustbundle-publisher-controller,\
-podcertificaterequest-cleaner-controller,\
-legacy-serviceaccount-token-cleaner-controller,\
-device-taint-eviction-controller,\
-validatingadmissionpolicy-status-controller,\
-volumeattributesclass-protection-controller";

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Setting {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|setting| setting.name() == name)
            .ok_or_else(|| {
                let known: Vec<_> = Self::ALL.iter().map(|s| s.name()).collect();
                format!(
                    "unknown control-plane setting {name:?} (known: {})",
                    known.join(", ")
                )
            })
    }
}

/// The settings a control plane starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    settings: BTreeSet<Setting>,
}

impl Tuning {
    /// The components' own defaults, as a production cluster would run them.
    pub fn stock() -> Self {
        Self {
            settings: BTreeSet::new(),
        }
    }

    /// What the local environment runs: every setting (see the module docs for why each).
    pub fn simulation() -> Self {
        Self {
            settings: Setting::ALL.into_iter().collect(),
        }
    }

    pub fn with(mut self, setting: Setting) -> Self {
        self.settings.insert(setting);
        self
    }

    pub fn without(mut self, setting: Setting) -> Self {
        self.settings.remove(&setting);
        self
    }

    pub fn contains(&self, setting: Setting) -> bool {
        self.settings.contains(&setting)
    }

    /// The client rate of kube-scheduler's flags, for a scheduler configuration file, which
    /// takes the place of those flags.
    pub fn client_rate(&self) -> Option<ksim_experiment::scheduler::ClientRate> {
        self.contains(Setting::ClientQps)
            .then_some(ksim_experiment::scheduler::ClientRate {
                qps: 5000.0,
                burst: 10_000,
            })
    }

    /// How long the virtual nodes' leases should be, for the pool's `--lease-duration-seconds`
    /// (the pool is not a control-plane component, so its flag is not among [`Self::flags`]).
    pub fn node_lease_seconds(&self) -> Option<u32> {
        self.contains(Setting::NodeLeases)
            .then_some(NODE_LEASE_SECONDS)
    }

    /// The flags every setting adds to `component`, in setting order.
    pub fn flags(&self, component: &str) -> Vec<String> {
        self.settings
            .iter()
            .flat_map(|setting| setting.flags(component))
            .map(|flag| (*flag).to_owned())
            .collect()
    }
}

/// The shortest of the shapes [`Tuning::from_str`] reads, else the settings joined by `+`.
impl fmt::Display for Tuning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let missing: Vec<Setting> = Setting::ALL
            .into_iter()
            .filter(|setting| !self.contains(*setting))
            .collect();
        match (self.settings.len(), missing.as_slice()) {
            (0, _) => f.write_str("stock"),
            (_, []) => f.write_str("simulation"),
            (_, [missing]) => write!(f, "simulation-{missing}"),
            (1, _) => write!(
                f,
                "stock+{}",
                self.settings.iter().next().map_or("", |s| s.name())
            ),
            _ => {
                let names: Vec<_> = self.settings.iter().map(|s| s.name()).collect();
                f.write_str(&names.join("+"))
            }
        }
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Self::simulation()
    }
}

/// `stock`, `simulation`, `stock+SETTING` (stock with one setting) or `simulation-SETTING`
/// (simulation without one): the shapes a benchmark compares side by side.
impl FromStr for Tuning {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "stock" => Ok(Self::stock()),
            "simulation" => Ok(Self::simulation()),
            _ => {
                if let Some(setting) = text.strip_prefix("stock+") {
                    Ok(Self::stock().with(setting.parse()?))
                } else if let Some(setting) = text.strip_prefix("simulation-") {
                    Ok(Self::simulation().without(setting.parse()?))
                } else {
                    Err(format!(
                        "control-plane tuning {text:?} is none of stock, simulation, \
                         stock+SETTING, simulation-SETTING"
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_adds_flags_to_some_component_except_in_memory_etcd() {
        let components = [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ];
        for setting in Setting::ALL {
            let flags: usize = components.iter().map(|c| setting.flags(c).len()).sum();
            // In-memory etcd moves its data directory instead of adding a flag.
            assert_eq!(
                flags == 0,
                setting == Setting::EtcdInMemory,
                "{setting} adds {flags} flags"
            );
            assert_eq!(setting.name().parse::<Setting>(), Ok(setting));
        }
    }

    #[test]
    fn shapes_parse_to_one_setting_more_or_less() {
        let tuning: Tuning = "stock+controllers".parse().unwrap();
        assert_eq!(tuning, Tuning::stock().with(Setting::Controllers));
        assert_eq!(
            tuning.flags("kube-controller-manager"),
            [CONTROLLERS.to_owned()]
        );
        assert!(tuning.flags("kube-apiserver").is_empty());

        let rate = Tuning::simulation().client_rate().unwrap();
        let flags = Tuning::simulation().flags("kube-scheduler");
        assert!(flags.contains(&format!("--kube-api-qps={}", rate.qps)));
        assert!(flags.contains(&format!("--kube-api-burst={}", rate.burst)));

        let tuning: Tuning = "simulation-client-qps".parse().unwrap();
        assert_eq!(tuning.client_rate(), None);
        assert!(!tuning.contains(Setting::ClientQps));
        assert!(tuning.contains(Setting::EtcdQuota));
        assert!(tuning.flags("kube-scheduler").is_empty());

        for shape in [
            "stock",
            "simulation",
            "stock+etcd-quota",
            "simulation-controllers",
        ] {
            assert_eq!(shape.parse::<Tuning>().unwrap().to_string(), shape);
        }

        let err = "stock+fast".parse::<Tuning>().unwrap_err();
        assert!(
            err.contains("unknown control-plane setting \"fast\""),
            "{err}"
        );
        assert!("tuned".parse::<Tuning>().is_err());
    }

    #[test]
    fn node_leases_outlast_a_missed_renewal_and_only_under_the_setting() {
        let tuning = Tuning::simulation();
        assert_eq!(tuning.node_lease_seconds(), Some(NODE_LEASE_SECONDS));
        assert!(tuning.flags("kube-controller-manager").contains(&format!(
            "--node-monitor-grace-period={NODE_MONITOR_GRACE_SECONDS}s"
        )));
        assert_eq!(
            Tuning::simulation()
                .without(Setting::NodeLeases)
                .node_lease_seconds(),
            None
        );
        assert_eq!(Tuning::stock().node_lease_seconds(), None);
    }

    #[test]
    fn controllers_kept_include_what_workloads_need() {
        let off: Vec<&str> = CONTROLLERS
            .trim_start_matches("--controllers=")
            .split(',')
            .collect();
        assert_eq!(off[0], "*");
        for needed in [
            "garbage-collector-controller",
            "deployment-controller",
            "replicaset-controller",
            "job-controller",
            "node-lifecycle-controller",
            "taint-eviction-controller",
            "namespace-controller",
            "serviceaccount-controller",
        ] {
            assert!(
                !off.contains(&format!("-{needed}").as_str()),
                "{needed} is off"
            );
        }
    }
}
