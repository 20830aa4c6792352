//! The kubelet's feature gates that change what the engine does: one [`FeatureGates`] value in
//! the pipeline's config, parsed from the kubelet's `--feature-gates=Name=true,Name2=false`
//! syntax with the kubelet's error texts (upstream `k8s.io/component-base/featuregate`, `Set`
//! and `SetFromMap`). The defaults are those of the kubelet probelet follows (v1.35), and a gate
//! newer than v1.35 has the default it was introduced with. With every gate at its default the
//! engine behaves as it always did. What each gate changes is in `docs/prober.md`.
//!
//! A gate the engine recognises but does not implement yet can only be set to its default: any
//! other value is refused, so a host never believes a behaviour is on when it is not.
//!
//! [`ALL_ALPHA`] and [`ALL_BETA`] are the kubelet's two special gates: `AllAlpha=true` turns on
//! every alpha gate that is not named explicitly (`AllBeta` every beta gate), in whatever order
//! the pairs come, as upstream's `setUnsetAlphaGates` / `setUnsetBetaGates` do. Gates of other
//! stages (GA, locked or not, and deprecated) are untouched. One deviation: a gate they would
//! move that the engine cannot take that value for (not implemented, or locked) keeps its
//! default, with a warning, instead of making the whole value an error.

use std::fmt;

use crate::gofmt::go_quote;

/// The kubelet's special gate that sets every alpha gate not set explicitly (upstream
/// `allAlphaGate`); itself alpha, default false.
pub const ALL_ALPHA: &str = "AllAlpha";

/// The kubelet's special gate that sets every beta gate not set explicitly (upstream
/// `allBetaGate`); itself beta, default false.
pub const ALL_BETA: &str = "AllBeta";

/// A feature gate the engine knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// Probe workers follow each container's lifecycle (`StartContainerProbes` /
    /// `StopContainerProbes`) instead of the pod's: alpha, off by default.
    ContainerLifecycleProber,
    /// Probe specs of a running pod change in place (KEP-6318, `ReconcilePod`): alpha, off by
    /// default.
    MutableContainerProbes,
    /// An agent restart resets `ready` / `started` as kubelets before KEP-4781 did: deprecated,
    /// off by default.
    ChangeContainerStatusOnKubeletRestart,
    /// In-place pod resize: GA and locked to on in v1.35.
    InPlacePodVerticalScaling,
    /// Container-level `restartPolicy` and `restartPolicyRules` on regular containers (KEP-5307):
    /// beta, on by default in v1.35.
    ContainerRestartRules,
    /// A restart rule's `RestartAllContainers` action restarts the whole pod in place
    /// (KEP-5532): alpha, off by default in v1.35.
    RestartAllContainersOnContainerExits,
}

/// How mature a gate is, as the kubelet's `--help` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Off by default, may change or go away.
    Alpha,
    /// Usually on by default.
    Beta,
    /// Always on; the gate is going away.
    Ga,
    /// The gate and the behaviour it switches on are going away.
    Deprecated,
}

/// What the engine knows about a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureSpec {
    /// The gate.
    pub feature: Feature,
    /// Its default in the kubelet probelet follows.
    pub default: bool,
    /// Its stage there.
    pub stage: Stage,
    /// It cannot be set to anything but its default.
    pub locked_to_default: bool,
    /// The engine implements what the gate switches; when false only the default is accepted.
    pub implemented: bool,
}

/// Every gate the engine knows.
pub const KNOWN_FEATURES: [FeatureSpec; 6] = [
    FeatureSpec {
        feature: Feature::ContainerLifecycleProber,
        default: false,
        stage: Stage::Alpha,
        locked_to_default: false,
        implemented: true,
    },
    FeatureSpec {
        feature: Feature::MutableContainerProbes,
        default: false,
        stage: Stage::Alpha,
        locked_to_default: false,
        implemented: true,
    },
    FeatureSpec {
        feature: Feature::ChangeContainerStatusOnKubeletRestart,
        default: false,
        stage: Stage::Deprecated,
        locked_to_default: false,
        implemented: true,
    },
    FeatureSpec {
        feature: Feature::InPlacePodVerticalScaling,
        default: true,
        stage: Stage::Ga,
        locked_to_default: true,
        implemented: true,
    },
    FeatureSpec {
        feature: Feature::ContainerRestartRules,
        default: true,
        stage: Stage::Beta,
        locked_to_default: false,
        implemented: true,
    },
    FeatureSpec {
        feature: Feature::RestartAllContainersOnContainerExits,
        default: false,
        stage: Stage::Alpha,
        locked_to_default: false,
        implemented: true,
    },
];

impl Feature {
    /// The gate's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Feature::ContainerLifecycleProber => "ContainerLifecycleProber",
            Feature::MutableContainerProbes => "MutableContainerProbes",
            Feature::ChangeContainerStatusOnKubeletRestart => "ChangeContainerStatusOnKubeletRestart",
            Feature::InPlacePodVerticalScaling => "InPlacePodVerticalScaling",
            Feature::ContainerRestartRules => "ContainerRestartRules",
            Feature::RestartAllContainersOnContainerExits => "RestartAllContainersOnContainerExits",
        }
    }

    /// The gate with this exact name (names are case-sensitive, as the kubelet's are).
    pub fn from_name(name: &str) -> Option<Feature> {
        KNOWN_FEATURES.iter().map(|s| s.feature).find(|f| f.name() == name)
    }

    /// What the engine knows about the gate.
    pub fn spec(self) -> FeatureSpec {
        KNOWN_FEATURES.iter().copied().find(|s| s.feature == self).unwrap_or(FeatureSpec {
            feature: self,
            default: false,
            stage: Stage::Alpha,
            locked_to_default: false,
            implemented: false,
        })
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a `--feature-gates` value was refused. The texts are the kubelet's, except
/// [`FeatureGateError::NotImplemented`], which the kubelet has no need for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// `Name` without `=value`.
    #[error("missing bool value for {0}")]
    MissingValue(String),
    /// A value Go's `strconv.ParseBool` does not take.
    #[error("invalid value of {name}={value}, err: strconv.ParseBool: parsing {quoted}: invalid syntax", quoted = go_quote(value))]
    InvalidValue {
        /// The gate's name as given.
        name: String,
        /// The value as given (trimmed).
        value: String,
    },
    /// A name the engine does not know.
    #[error("unrecognized feature gate: {0}")]
    Unrecognized(String),
    /// A gate locked to its default, set to the other value.
    #[error("cannot set feature gate {feature} to {value}, feature is locked to {default}")]
    Locked {
        /// The gate.
        feature: Feature,
        /// The value asked for.
        value: bool,
        /// The only value it takes.
        default: bool,
    },
    /// A gate the engine recognises but does not implement, set to other than its default.
    #[error("cannot set feature gate {feature} to {value}: probelet does not implement it yet")]
    NotImplemented {
        /// The gate.
        feature: Feature,
        /// The value asked for.
        value: bool,
    },
    /// More than one gate was refused (upstream aggregates them in brackets).
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Several(Vec<FeatureGateError>),
}

/// The value of every gate the engine knows. `Default` is the kubelet's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    container_lifecycle_prober: bool,
    mutable_container_probes: bool,
    change_container_status_on_kubelet_restart: bool,
    in_place_pod_vertical_scaling: bool,
    container_restart_rules: bool,
    restart_all_containers_on_container_exits: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        let mut gates = FeatureGates {
            container_lifecycle_prober: false,
            mutable_container_probes: false,
            change_container_status_on_kubelet_restart: false,
            in_place_pod_vertical_scaling: false,
            container_restart_rules: false,
            restart_all_containers_on_container_exits: false,
        };
        for spec in KNOWN_FEATURES {
            *gates.slot(spec.feature) = spec.default;
        }
        gates
    }
}

/// What parsing a `--feature-gates` value gave: the gates, and the warnings the kubelet logs
/// for setting a deprecated or GA gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedFeatureGates {
    /// The defaults with the given values applied.
    pub gates: FeatureGates,
    /// One line per deprecated or GA gate that was set, in the kubelet's words.
    pub warnings: Vec<String>,
}

impl FeatureGates {
    /// Whether the gate is on.
    pub fn enabled(&self, feature: Feature) -> bool {
        match feature {
            Feature::ContainerLifecycleProber => self.container_lifecycle_prober,
            Feature::MutableContainerProbes => self.mutable_container_probes,
            Feature::ChangeContainerStatusOnKubeletRestart => self.change_container_status_on_kubelet_restart,
            Feature::InPlacePodVerticalScaling => self.in_place_pod_vertical_scaling,
            Feature::ContainerRestartRules => self.container_restart_rules,
            Feature::RestartAllContainersOnContainerExits => self.restart_all_containers_on_container_exits,
        }
    }

    /// The gates with `feature` set to `value`, checked as the command line is: a locked gate
    /// or an unimplemented one only takes its default.
    pub fn with(mut self, feature: Feature, value: bool) -> Result<FeatureGates, FeatureGateError> {
        check(feature, value)?;
        *self.slot(feature) = value;
        Ok(self)
    }

    fn slot(&mut self, feature: Feature) -> &mut bool {
        match feature {
            Feature::ContainerLifecycleProber => &mut self.container_lifecycle_prober,
            Feature::MutableContainerProbes => &mut self.mutable_container_probes,
            Feature::ChangeContainerStatusOnKubeletRestart => {
                &mut self.change_container_status_on_kubelet_restart
            }
            Feature::InPlacePodVerticalScaling => &mut self.in_place_pod_vertical_scaling,
            Feature::ContainerRestartRules => &mut self.container_restart_rules,
            Feature::RestartAllContainersOnContainerExits => {
                &mut self.restart_all_containers_on_container_exits
            }
        }
    }

    /// Parses the kubelet's `--feature-gates` syntax: `Name=bool` pairs separated by commas,
    /// blanks around names and values ignored, empty items skipped, a later value of a gate
    /// winning. Values are Go's booleans (`1 t T TRUE true True 0 f F FALSE false False`).
    /// [`ALL_ALPHA`] and [`ALL_BETA`] set every alpha (beta) gate not named (module doc).
    /// A malformed pair is reported first; then the first unknown name; then every gate that
    /// cannot take its value.
    pub fn parse(value: &str) -> Result<ParsedFeatureGates, FeatureGateError> {
        let mut pairs: Vec<(String, bool)> = Vec::new();
        for item in value.split(',') {
            if item.is_empty() {
                continue;
            }
            let (name, raw) = match item.split_once('=') {
                Some((name, raw)) => (name.trim(), raw.trim()),
                None => return Err(FeatureGateError::MissingValue(item.trim().to_owned())),
            };
            let parsed = parse_go_bool(raw).ok_or_else(|| FeatureGateError::InvalidValue {
                name: name.to_owned(),
                value: raw.to_owned(),
            })?;
            match pairs.iter_mut().find(|(n, _)| n == name) {
                Some(pair) => pair.1 = parsed,
                None => pairs.push((name.to_owned(), parsed)),
            }
        }
        let mut all = Vec::new();
        let mut named = Vec::new();
        for (name, value) in pairs {
            let stage = match name.as_str() {
                ALL_ALPHA => Stage::Alpha,
                ALL_BETA => Stage::Beta,
                _ => match Feature::from_name(&name) {
                    Some(feature) => {
                        named.push((name, feature, value));
                        continue;
                    }
                    None => return Err(FeatureGateError::Unrecognized(name)),
                },
            };
            all.push((name, stage, value));
        }
        let mut gates = FeatureGates::default();
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        // Upstream sets only the gates not in its map yet and lets a named gate overwrite: either
        // way a named gate wins, so the special gates go first here.
        for (special, stage, value) in all {
            let unnamed = KNOWN_FEATURES.iter().filter(|spec| spec.stage == stage).map(|spec| spec.feature);
            for feature in unnamed.filter(|f| !named.iter().any(|(_, n, _)| n == f)) {
                match gates.with(feature, value) {
                    Ok(next) => gates = next,
                    Err(err) => warnings.push(format!(
                        "{special}={value} leaves {feature} at {default} ({err})",
                        default = feature.spec().default
                    )),
                }
            }
        }
        for (name, feature, value) in named {
            match gates.with(feature, value) {
                Ok(next) => gates = next,
                Err(err) => {
                    errors.push(err);
                    continue;
                }
            }
            match feature.spec().stage {
                Stage::Deprecated => warnings.push(format!(
                    "Setting deprecated feature gate {name}={value}. It will be removed in a future release."
                )),
                Stage::Ga => warnings.push(format!(
                    "Setting GA feature gate {name}={value}. It will be removed in a future release."
                )),
                Stage::Alpha | Stage::Beta => {}
            }
        }
        match errors.len() {
            0 => Ok(ParsedFeatureGates { gates, warnings }),
            1 => Err(errors.remove(0)),
            _ => Err(FeatureGateError::Several(errors)),
        }
    }
}

fn check(feature: Feature, value: bool) -> Result<(), FeatureGateError> {
    let spec = feature.spec();
    if spec.locked_to_default && value != spec.default {
        return Err(FeatureGateError::Locked { feature, value, default: spec.default });
    }
    if !spec.implemented && value != spec.default {
        return Err(FeatureGateError::NotImplemented { feature, value });
    }
    Ok(())
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_kubelets() {
        let gates = FeatureGates::default();
        assert!(!gates.enabled(Feature::ContainerLifecycleProber));
        assert!(!gates.enabled(Feature::MutableContainerProbes));
        assert!(!gates.enabled(Feature::ChangeContainerStatusOnKubeletRestart));
        assert!(gates.enabled(Feature::InPlacePodVerticalScaling));
        assert!(gates.enabled(Feature::ContainerRestartRules));
        assert!(!gates.enabled(Feature::RestartAllContainersOnContainerExits));
    }

    #[test]
    fn container_restart_rules_can_be_turned_off_and_restart_all_on() {
        let parsed = FeatureGates::parse("ContainerRestartRules=false").unwrap();
        assert!(!parsed.gates.enabled(Feature::ContainerRestartRules));
        assert!(parsed.warnings.is_empty(), "a beta gate gets no warning: {:?}", parsed.warnings);
        let parsed = FeatureGates::parse("RestartAllContainersOnContainerExits=true").unwrap();
        assert!(parsed.gates.enabled(Feature::RestartAllContainersOnContainerExits));
        assert!(parsed.warnings.is_empty(), "an alpha gate gets no warning: {:?}", parsed.warnings);
        assert!(FeatureGates::parse("RestartAllContainersOnContainerExits=false").is_ok());
    }

    /// Every gate is implemented today; the refusal of one that is not keeps its text for the
    /// next gate recognised before it is implemented.
    #[test]
    fn the_refusal_of_an_unimplemented_gate_reads_so() {
        assert!(KNOWN_FEATURES.iter().all(|s| s.implemented));
        let err = FeatureGateError::NotImplemented { feature: Feature::MutableContainerProbes, value: true };
        assert_eq!(
            err.to_string(),
            "cannot set feature gate MutableContainerProbes to true: probelet does not implement it yet"
        );
    }

    #[test]
    fn parses_pairs_with_blanks_empty_items_and_go_booleans() {
        let parsed =
            FeatureGates::parse(" ContainerLifecycleProber = T ,,ChangeContainerStatusOnKubeletRestart=1,")
                .unwrap();
        assert!(parsed.gates.enabled(Feature::ContainerLifecycleProber));
        assert!(parsed.gates.enabled(Feature::ChangeContainerStatusOnKubeletRestart));
        assert_eq!(
            parsed.warnings,
            [
                "Setting deprecated feature gate ChangeContainerStatusOnKubeletRestart=true. It will be removed in a future release."
            ]
        );
        for (text, want) in
            [("true", true), ("True", true), ("TRUE", true), ("0", false), ("f", false), ("False", false)]
        {
            let parsed = FeatureGates::parse(&format!("ContainerLifecycleProber={text}")).unwrap();
            assert_eq!(parsed.gates.enabled(Feature::ContainerLifecycleProber), want, "{text}");
        }
        assert_eq!(FeatureGates::parse("").unwrap().gates, FeatureGates::default());
    }

    #[test]
    fn a_later_value_wins() {
        let parsed =
            FeatureGates::parse("ContainerLifecycleProber=true,ContainerLifecycleProber=false").unwrap();
        assert!(!parsed.gates.enabled(Feature::ContainerLifecycleProber));
    }

    #[test]
    fn error_texts_are_the_kubelets() {
        let err = |s: &str| FeatureGates::parse(s).unwrap_err().to_string();
        assert_eq!(err("Foo=true"), "unrecognized feature gate: Foo");
        assert_eq!(
            err("containerlifecycleprober=true"),
            "unrecognized feature gate: containerlifecycleprober"
        );
        assert_eq!(err("ContainerLifecycleProber"), "missing bool value for ContainerLifecycleProber");
        assert_eq!(
            err("ContainerLifecycleProber=yes"),
            "invalid value of ContainerLifecycleProber=yes, err: strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
        assert_eq!(
            err("ContainerLifecycleProber="),
            "invalid value of ContainerLifecycleProber=, err: strconv.ParseBool: parsing \"\": invalid syntax"
        );
        assert_eq!(
            err("InPlacePodVerticalScaling=false"),
            "cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true"
        );
    }

    #[test]
    fn a_malformed_pair_is_reported_before_an_unknown_name() {
        assert_eq!(
            FeatureGates::parse("Foo=true,ContainerLifecycleProber=maybe").unwrap_err(),
            FeatureGateError::InvalidValue { name: "ContainerLifecycleProber".into(), value: "maybe".into() }
        );
    }

    #[test]
    fn locked_gate_at_its_default_is_accepted_with_the_ga_warning() {
        let parsed = FeatureGates::parse("InPlacePodVerticalScaling=true").unwrap();
        assert!(parsed.gates.enabled(Feature::InPlacePodVerticalScaling));
        assert_eq!(
            parsed.warnings,
            [
                "Setting GA feature gate InPlacePodVerticalScaling=true. It will be removed in a future release."
            ]
        );
    }

    #[test]
    fn mutable_container_probes_is_accepted_and_off_by_default() {
        assert!(!FeatureGates::default().enabled(Feature::MutableContainerProbes));
        let parsed = FeatureGates::parse("MutableContainerProbes=true").unwrap();
        assert!(parsed.gates.enabled(Feature::MutableContainerProbes));
        assert!(parsed.warnings.is_empty(), "an alpha gate gets no warning: {:?}", parsed.warnings);
    }

    /// Only one gate can be refused today (the locked one), so the aggregate is built by hand.
    #[test]
    fn several_refusals_are_aggregated_in_brackets() {
        let err = FeatureGateError::Several(vec![
            FeatureGateError::Locked {
                feature: Feature::InPlacePodVerticalScaling,
                value: false,
                default: true,
            },
            FeatureGateError::NotImplemented { feature: Feature::MutableContainerProbes, value: true },
        ]);
        assert_eq!(
            err.to_string(),
            "[cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true, \
             cannot set feature gate MutableContainerProbes to true: probelet does not implement it yet]"
        );
    }

    /// Every gate's value after `value`, in `KNOWN_FEATURES` order.
    fn values(value: &str) -> Vec<(Feature, bool)> {
        let gates = FeatureGates::parse(value).unwrap().gates;
        KNOWN_FEATURES.iter().map(|s| (s.feature, gates.enabled(s.feature))).collect()
    }

    /// The defaults with `changes` applied, in `KNOWN_FEATURES` order.
    fn defaults_with(changes: &[(Feature, bool)]) -> Vec<(Feature, bool)> {
        KNOWN_FEATURES
            .iter()
            .map(|s| {
                let changed = changes.iter().find(|(f, _)| *f == s.feature).map(|(_, v)| *v);
                (s.feature, changed.unwrap_or(s.default))
            })
            .collect()
    }

    #[test]
    fn all_alpha_sets_every_alpha_gate_it_can_and_leaves_other_stages_alone() {
        let parsed = FeatureGates::parse("AllAlpha=true").unwrap();
        assert_eq!(
            values("AllAlpha=true"),
            defaults_with(&[
                (Feature::ContainerLifecycleProber, true),
                (Feature::MutableContainerProbes, true),
                (Feature::RestartAllContainersOnContainerExits, true),
            ]),
        );
        assert!(parsed.warnings.is_empty(), "the special gate itself gets no warning: {:?}", parsed.warnings);
        assert_eq!(values("AllAlpha=false"), defaults_with(&[]));
        assert!(FeatureGates::parse("AllAlpha=false").unwrap().warnings.is_empty());
    }

    #[test]
    fn all_beta_sets_every_beta_gate_and_never_a_ga_or_deprecated_one() {
        assert_eq!(values("AllBeta=false"), defaults_with(&[(Feature::ContainerRestartRules, false)]));
        assert_eq!(values("AllBeta=true"), defaults_with(&[]));
        assert!(FeatureGates::parse("AllBeta=false").unwrap().warnings.is_empty());
        // InPlacePodVerticalScaling (GA, locked to true) and ChangeContainerStatusOnKubeletRestart
        // (deprecated) stay at their defaults with both special gates either way.
        for value in ["AllAlpha=true,AllBeta=true", "AllAlpha=false,AllBeta=false"] {
            let gates = FeatureGates::parse(value).unwrap().gates;
            assert!(gates.enabled(Feature::InPlacePodVerticalScaling), "{value}");
            assert!(!gates.enabled(Feature::ChangeContainerStatusOnKubeletRestart), "{value}");
        }
    }

    #[test]
    fn a_named_gate_wins_over_all_alpha_and_all_beta_in_either_order() {
        let want = defaults_with(&[
            (Feature::ContainerLifecycleProber, true),
            (Feature::RestartAllContainersOnContainerExits, true),
        ]);
        assert_eq!(values("AllAlpha=true,MutableContainerProbes=false"), want);
        assert_eq!(values("MutableContainerProbes=false,AllAlpha=true"), want);
        let want = defaults_with(&[(Feature::MutableContainerProbes, true)]);
        assert_eq!(values("AllAlpha=false,MutableContainerProbes=true"), want);
        assert_eq!(values("MutableContainerProbes=true,AllAlpha=false"), want);
        assert_eq!(values("ContainerRestartRules=true,AllBeta=false"), defaults_with(&[]));
        assert_eq!(values("AllBeta=false,ContainerRestartRules=true"), defaults_with(&[]));
        let want = defaults_with(&[
            (Feature::ContainerLifecycleProber, true),
            (Feature::MutableContainerProbes, true),
        ]);
        assert_eq!(values("AllAlpha=true,RestartAllContainersOnContainerExits=false"), want);
        assert_eq!(values("RestartAllContainersOnContainerExits=false,AllAlpha=true"), want);
    }

    #[test]
    fn the_special_gates_parse_as_any_gate() {
        assert_eq!(values("AllAlpha=true,AllAlpha=false"), defaults_with(&[]), "a later value wins");
        assert_eq!(values(" AllBeta = F ,"), defaults_with(&[(Feature::ContainerRestartRules, false)]));
        let err = |s: &str| FeatureGates::parse(s).unwrap_err().to_string();
        assert_eq!(err("allalpha=true"), "unrecognized feature gate: allalpha");
        assert_eq!(err("AllBeta"), "missing bool value for AllBeta");
        assert_eq!(
            err("AllAlpha=on"),
            "invalid value of AllAlpha=on, err: strconv.ParseBool: parsing \"on\": invalid syntax"
        );
    }

    #[test]
    fn names_round_trip() {
        for spec in KNOWN_FEATURES {
            assert_eq!(Feature::from_name(spec.feature.name()), Some(spec.feature));
            assert_eq!(spec.feature.spec(), spec);
        }
    }
}
