//! Port resolution shared by the HTTP and TCP probes (upstream `probe.ResolveContainerPort`).

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ProbeError;

/// Resolves a probe's port: a number must be in 1..=65535; a string must name one of the
/// container's ports. Numeric strings are not names (the kubelet stopped accepting them).
pub fn resolve_container_port(port: &IntOrString, container: &Container) -> Result<u16, ProbeError> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => find_port_by_name(container, name)?,
    };
    u16::try_from(number).ok().filter(|p| *p > 0).ok_or(ProbeError::InvalidPort(number))
}

fn find_port_by_name(container: &Container, name: &str) -> Result<i64, ProbeError> {
    container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .map(|p| i64::from(p.container_port))
        .ok_or_else(|| ProbeError::PortNotFound(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    fn container_with_ports(ports: &[(&str, i32)]) -> Container {
        Container {
            name: "c".into(),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p)| ContainerPort {
                        name: Some((*n).into()),
                        container_port: *p,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn resolves_numbers_and_names() {
        let c = container_with_ports(&[("http", 8080), ("bad", 70000)]);
        let cases: Vec<(&str, IntOrString, Result<u16, ProbeError>)> = vec![
            ("int", IntOrString::Int(80), Ok(80)),
            ("max", IntOrString::Int(65535), Ok(65535)),
            ("zero", IntOrString::Int(0), Err(ProbeError::InvalidPort(0))),
            ("too big", IntOrString::Int(70000), Err(ProbeError::InvalidPort(70000))),
            ("negative", IntOrString::Int(-1), Err(ProbeError::InvalidPort(-1))),
            ("name", IntOrString::String("http".into()), Ok(8080)),
            (
                "named port out of range",
                IntOrString::String("bad".into()),
                Err(ProbeError::InvalidPort(70000)),
            ),
            (
                "unknown name",
                IntOrString::String("grpc".into()),
                Err(ProbeError::PortNotFound("grpc".into())),
            ),
            (
                "numeric string is no name",
                IntOrString::String("8080".into()),
                Err(ProbeError::PortNotFound("8080".into())),
            ),
        ];
        for (name, port, want) in cases {
            assert_eq!(resolve_container_port(&port, &c), want, "case {name}");
        }
    }

    #[test]
    fn error_texts_match_upstream() {
        assert_eq!(ProbeError::InvalidPort(0).to_string(), "invalid port number: 0");
        assert_eq!(ProbeError::PortNotFound("web".into()).to_string(), "port \"web\" not found");
    }
}
