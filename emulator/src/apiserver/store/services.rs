//! Services as kube-apiserver's registry keeps them (`pkg/registry/core/service/storage`):
//! `SetDefaults_Service`, a ClusterIP from the service range and NodePorts from the
//! node-port range on create, both kept across updates that leave them out
//! (`patchAllocatedValues`) and refused when changed; the checks of `validateService` a
//! user of `kubectl expose` / `create service` meets first.
//!
//! Nothing routes traffic: there is no kube-proxy and pods have no IPs of their own, so no
//! EndpointSlices are written (see docs/emulator.md).

use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::{ApiError, ApiResult, FieldCause, ResourceKey, Store};

/// kind's default `serviceSubnet` (kube-apiserver `--service-cluster-ip-range`).
const SERVICE_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 96, 0, 0), 16);
/// `DefaultServiceNodePortRange`: 30000–32767.
const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;
/// KEP-3070: the lower band of the range is left to services that ask for an address
/// (`min(max(16, size/16), 256)` addresses), the rest is allocated at random.
const STATIC_BAND: u32 = 256;

const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];

fn range_text() -> String {
    format!("{}/{}", SERVICE_RANGE.0, SERVICE_RANGE.1)
}

/// The address at `offset` in the service range, if it is inside it.
fn address_at(offset: u32) -> Option<Ipv4Addr> {
    let size = 1u32 << (32 - SERVICE_RANGE.1);
    (offset < size).then(|| Ipv4Addr::from(u32::from(SERVICE_RANGE.0) + offset))
}

/// Whether an address can be allocated: inside the range, not its network or broadcast one.
fn in_range(ip: Ipv4Addr) -> bool {
    let base = u32::from(SERVICE_RANGE.0);
    let size = 1u32 << (32 - SERVICE_RANGE.1);
    let offset = u32::from(ip).wrapping_sub(base);
    u32::from(ip) >= base && offset > 0 && offset < size - 1
}

/// `kubernetes` in `default`: the apiserver's own Service, on the range's first address.
pub(super) fn kubernetes_service() -> Value {
    json!({
        "metadata": {
            "name": "kubernetes",
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "clusterIP": address_at(1).map(|ip| ip.to_string()),
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
        },
    })
}

/// `SetDefaults_Service` and the IP-family fields the registry fills for a single-stack
/// IPv4 cluster.
pub(super) fn default_service(spec: &mut Value) {
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let kind = spec
        .entry("type")
        .or_insert_with(|| json!("ClusterIP"))
        .as_str()
        .unwrap_or_default()
        .to_string();
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    if kind != "ExternalName" {
        spec.entry("internalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
        spec.entry("ipFamilyPolicy")
            .or_insert_with(|| json!("SingleStack"));
        spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
    }
    if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
        spec.entry("externalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        spec.entry("allocateLoadBalancerNodePorts")
            .or_insert_with(|| json!(true));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.entry("protocol").or_insert_with(|| json!("TCP"));
            if port.get("targetPort").is_none_or(|t| t == 0 || t == "") {
                let number = port.get("port").cloned().unwrap_or(Value::Null);
                port.insert("targetPort".into(), number);
            }
        }
    }
}

fn text<'a>(service: &'a Value, pointer: &str) -> &'a str {
    service
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn ports(service: &Value) -> &[Value] {
    service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `validateService`'s checks on type, ports and names (create and update).
fn validate(service: &Value, causes: &mut Vec<FieldCause>) {
    let kind = text(service, "/spec/type");
    if !TYPES.contains(&kind) {
        let allowed: Vec<Value> = TYPES.iter().map(|t| json!(t)).collect();
        causes.push(FieldCause::not_supported(
            "spec.type",
            &json!(kind),
            &allowed,
        ));
    }
    let headless = text(service, "/spec/clusterIP") == "None";
    let ports = ports(service);
    if ports.is_empty() && !headless && kind != "ExternalName" {
        causes.push(FieldCause::required("spec.ports", ""));
    }
    if kind == "ExternalName" && text(service, "/spec/externalName").is_empty() {
        causes.push(FieldCause::required("spec.externalName", ""));
    }
    let mut names = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = port.get("name").and_then(Value::as_str).unwrap_or_default();
        if ports.len() > 1 && name.is_empty() {
            causes.push(FieldCause::required(format!("{at}.name"), ""));
        } else if !name.is_empty() {
            if names.contains(&name) {
                causes.push(FieldCause {
                    reason: "FieldValueDuplicate",
                    message: format!("Duplicate value: {}", json!(name)),
                    field: format!("{at}.name"),
                });
            }
            names.push(name);
        }
        let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&number) {
            causes.push(FieldCause::invalid(
                format!("{at}.port"),
                &json!(number),
                "must be between 1 and 65535, inclusive",
            ));
        }
        if kind == "ClusterIP" && port.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
            causes.push(FieldCause::forbidden(
                format!("{at}.nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
    }
}

/// What the registry allocated that an update leaves out, copied from the stored object
/// (`patchAllocatedValues`): `kubectl replace` of the original manifest keeps the address.
pub(super) fn keep_allocated(old: &Value, new: &mut Value) {
    let (Some(old_spec), Some(new_spec)) = (
        old.get("spec").and_then(Value::as_object),
        new.get_mut("spec").and_then(Value::as_object_mut),
    ) else {
        return;
    };
    if old_spec.get("type") == new_spec.get("type") {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if let (None, Some(value)) = (new_spec.get(field), old_spec.get(field)) {
                new_spec.insert(field.into(), value.clone());
            }
        }
    }
    let old_ports = old_spec.get("ports").and_then(Value::as_array);
    if let Some(new_ports) = new_spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in new_ports.iter_mut().filter_map(Value::as_object_mut) {
            if port.get("nodePort").is_some() {
                continue;
            }
            let same = old_ports.into_iter().flatten().find(|o| {
                o.get("port") == port.get("port") && o.get("protocol") == port.get("protocol")
            });
            if let Some(node_port) = same.and_then(|o| o.get("nodePort")) {
                port.insert("nodePort".into(), node_port.clone());
            }
        }
    }
}

impl Store {
    /// Every ClusterIP and NodePort held by a stored Service.
    fn service_allocations(&self) -> (Vec<Ipv4Addr>, Vec<i64>) {
        let key = ResourceKey {
            group: String::new(),
            plural: "services".into(),
        };
        let mut ips = Vec::new();
        let mut node_ports = Vec::new();
        for stored in self.objects.get(&key).into_iter().flat_map(|m| m.values()) {
            if let Ok(ip) = text(&stored.object, "/spec/clusterIP").parse() {
                ips.push(ip);
            }
            node_ports.extend(
                ports(&stored.object)
                    .iter()
                    .filter_map(|p| p.get("nodePort").and_then(Value::as_i64)),
            );
        }
        (ips, node_ports)
    }

    /// A new Service: defaults given, its ClusterIP and NodePorts allocated, or the
    /// request refused naming the field, as the registry's allocators answer.
    pub(super) fn admit_new_service(&self, service: &mut Value, name: &str) -> ApiResult<()> {
        let mut causes = Vec::new();
        validate(service, &mut causes);
        if !causes.is_empty() {
            return Err(ApiError::invalid("Service", name, causes));
        }
        let (used_ips, used_ports) = self.service_allocations();
        let kind = text(service, "/spec/type").to_string();
        let asked = text(service, "/spec/clusterIP").to_string();
        let refuse = |detail: String| {
            let value = json!([asked]);
            ApiError::invalid(
                "Service",
                name,
                vec![FieldCause::invalid("spec.clusterIPs", &value, detail)],
            )
        };
        let cluster_ip = match (kind.as_str(), asked.as_str()) {
            ("ExternalName", _) => None,
            (_, "None") => Some("None".to_string()),
            (_, "") => Some(free_address(&used_ips).map_err(refuse)?.to_string()),
            (_, given) => {
                let ip: Ipv4Addr = given.parse().map_err(|_| {
                    let cause = FieldCause::invalid(
                        "spec.clusterIPs[0]",
                        &json!(given),
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    );
                    ApiError::invalid("Service", name, vec![cause])
                })?;
                if !in_range(ip) {
                    return Err(refuse(format!(
                        "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                        range_text()
                    )));
                }
                if used_ips.contains(&ip) {
                    return Err(refuse(format!(
                        "failed to allocate IP {ip}: provided IP is already allocated"
                    )));
                }
                Some(ip.to_string())
            }
        };
        if let (Some(ip), Some(spec)) = (cluster_ip, service.get_mut("spec")) {
            spec["clusterIP"] = json!(ip);
            spec["clusterIPs"] = json!([ip]);
        }
        if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
            self.allocate_node_ports(service, name, used_ports)?;
        }
        Ok(())
    }

    fn allocate_node_ports(
        &self,
        service: &mut Value,
        name: &str,
        mut used: Vec<i64>,
    ) -> ApiResult<()> {
        let Some(ports) = service
            .pointer_mut("/spec/ports")
            .and_then(Value::as_array_mut)
        else {
            return Ok(());
        };
        for (i, port) in ports.iter_mut().enumerate() {
            let at = format!("spec.ports[{i}].nodePort");
            let refuse = |value: i64, detail: String| {
                ApiError::invalid(
                    "Service",
                    name,
                    vec![FieldCause::invalid(at.clone(), &json!(value), detail)],
                )
            };
            let node_port = match port.get("nodePort").and_then(Value::as_i64) {
                Some(asked) if !NODE_PORTS.contains(&asked) => {
                    return Err(refuse(
                        asked,
                        format!(
                            "provided port is not in the valid range. The range of valid ports is {}-{}",
                            NODE_PORTS.start(),
                            NODE_PORTS.end()
                        ),
                    ));
                }
                Some(asked) if used.contains(&asked) => {
                    return Err(refuse(asked, "provided port is already allocated".into()));
                }
                Some(asked) => asked,
                None => NODE_PORTS
                    .clone()
                    .find(|p| !used.contains(p))
                    .ok_or_else(|| ApiError::internal("range is full: no NodePort left"))?,
            };
            used.push(node_port);
            port["nodePort"] = json!(node_port);
        }
        Ok(())
    }

    /// An update: allocated values kept when left out, refused when changed.
    pub(super) fn admit_service_update(old: &Value, new: &mut Value, name: &str) -> ApiResult<()> {
        keep_allocated(old, new);
        let mut causes = Vec::new();
        validate(new, &mut causes);
        let before = text(old, "/spec/clusterIP");
        let after = text(new, "/spec/clusterIP");
        let same_type = text(old, "/spec/type") == text(new, "/spec/type");
        if same_type && !before.is_empty() && before != after {
            let value = new
                .pointer("/spec/clusterIPs")
                .cloned()
                .unwrap_or(json!([after]));
            causes.push(FieldCause::invalid(
                "spec.clusterIPs[0]",
                &value,
                "may not change once set",
            ));
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid("Service", name, causes))
        }
    }
}

/// A free address outside the static band, starting at a random offset (upstream picks at
/// random too), else any free address above the range's first.
fn free_address(used: &[Ipv4Addr]) -> Result<Ipv4Addr, String> {
    let size = 1u32 << (32 - SERVICE_RANGE.1);
    let dynamic = size - STATIC_BAND - 1;
    let start = u32::from_le_bytes(
        uuid::Uuid::new_v4().as_bytes()[..4]
            .try_into()
            .unwrap_or([0; 4]),
    ) % dynamic;
    let candidates = (0..dynamic)
        .map(|i| STATIC_BAND + (start + i) % dynamic)
        .chain(2..STATIC_BAND);
    candidates
        .filter_map(address_at)
        .find(|ip| in_range(*ip) && !used.contains(ip))
        .ok_or_else(|| {
            format!(
                "failed to allocate IP: range is full: no address left in {}",
                range_text()
            )
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_inside_the_range() {
        assert_eq!(address_at(1), Some(Ipv4Addr::new(10, 96, 0, 1)));
        assert!(in_range(Ipv4Addr::new(10, 96, 255, 254)));
        assert!(!in_range(Ipv4Addr::new(10, 96, 255, 255)));
        assert!(!in_range(Ipv4Addr::new(10, 96, 0, 0)));
        assert!(!in_range(Ipv4Addr::new(10, 97, 0, 1)));
        let ip = free_address(&[]).unwrap();
        assert!(in_range(ip) && u32::from(ip) - u32::from(SERVICE_RANGE.0) >= STATIC_BAND);
    }

    #[test]
    fn defaults_fill_ports_and_families() {
        let mut spec = json!({"ports": [{"port": 80}], "selector": {"app": "x"}});
        default_service(&mut spec);
        assert_eq!(spec["type"], "ClusterIP");
        assert_eq!(spec["ports"][0]["protocol"], "TCP");
        assert_eq!(spec["ports"][0]["targetPort"], 80);
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
    }

    #[test]
    fn updates_keep_what_was_allocated() {
        let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.3.4", "clusterIPs": ["10.96.3.4"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30001}]}});
        let mut new =
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}]}});
        Store::admit_service_update(&old, &mut new, "web").unwrap();
        assert_eq!(new["spec"]["clusterIP"], "10.96.3.4");
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30001);
        let mut moved = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.9.9",
            "ports": [{"port": 80, "protocol": "TCP"}]}});
        let err = Store::admit_service_update(&old, &mut moved, "web").unwrap_err();
        assert!(err.to_string().contains("may not change once set"), "{err}");
    }
}
