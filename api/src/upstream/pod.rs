//! The Pod as Kubernetes 1.27–1.30 serve it, for classic DRA, and as 1.31+ serve it, for
//! structured DRA.
//!
//! k8s-openapi 0.29 models the Pod of 1.34, where `spec.resourceClaims[].source` no longer
//! exists, so deserializing a 1.30 Pod with it would silently drop the claim references.
//! 1.31 moved `resourceClaimName` / `resourceClaimTemplateName` from `source` onto the
//! entry itself; [`PodResourceClaim`] reads both layouts.
//! [`DraPod`] models just the fields DRA needs and keeps every other field it
//! reads in `extra` maps, at each level it models, so that writing a Pod back (update,
//! status update) never loses fields — even ones that no Kubernetes release this crate
//! knows has.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::upstream::v1alpha2::{serialize_object, serialize_opt};

/// A core/v1 Pod, reduced to the fields DRA uses (classic and structured); see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DraPod {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec, with the claim references.
    #[serde(default)]
    pub spec: Option<DraPodSpec>,
    /// The status, with the names of generated claims.
    #[serde(default)]
    pub status: Option<DraPodStatus>,
}

impl k8s_openapi::Resource for DraPod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for DraPod {
    const LIST_KIND: &'static str = "PodList";
}

impl k8s_openapi::Metadata for DraPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Serialize for DraPod {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        serialize_object::<Self, _, _>(ser, 3, |obj| {
            obj.serialize_field("metadata", &self.metadata)?;
            serialize_opt(obj, "spec", &self.spec)?;
            serialize_opt(obj, "status", &self.status)
        })
    }
}

/// The Pod spec fields classic DRA uses, plus everything else in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DraPodSpec {
    /// The node the Pod is bound to; set by the scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The claims the Pod's containers may refer to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Vec<PodResourceClaim>>,
    /// The containers; required by the API, so always written.
    #[serde(default)]
    pub containers: Vec<ClassicContainer>,
    /// Init containers can use claims too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<ClassicContainer>>,
    /// Every other spec field, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A claim reference in `spec.resourceClaims`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodResourceClaim {
    /// The name containers use for it, unique within the Pod.
    #[serde(default)]
    pub name: String,
    /// Where the claim comes from (1.27–1.30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ClaimSource>,
    /// An existing claim in the Pod's namespace (1.31+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_name: Option<String>,
    /// A template the resource-claim controller creates a claim from (1.31+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_template_name: Option<String>,
    /// Every other field, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PodResourceClaim {
    /// The existing claim this entry names, in either layout.
    pub fn direct_claim_name(&self) -> Option<&str> {
        self.resource_claim_name
            .as_deref()
            .or_else(|| self.source.as_ref()?.resource_claim_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// The template this entry names, in either layout.
    pub fn template_name(&self) -> Option<&str> {
        self.resource_claim_template_name
            .as_deref()
            .or_else(|| {
                self.source
                    .as_ref()?
                    .resource_claim_template_name
                    .as_deref()
            })
            .filter(|n| !n.is_empty())
    }
}

/// Exactly one of the two fields is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSource {
    /// An existing claim in the Pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_name: Option<String>,
    /// A template the resource-claim controller creates a claim from for this Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_template_name: Option<String>,
    /// Every other field, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The container fields classic DRA uses, plus everything else in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassicContainer {
    /// The container's name.
    #[serde(default)]
    pub name: String,
    /// Requests, limits and claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ClassicResourceRequirements>,
    /// Every other container field, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `resources` of a container: the claims, plus `limits`/`requests` in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassicResourceRequirements {
    /// Names of entries of `spec.resourceClaims` this container uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Vec<ContainerClaim>>,
    /// Every other field, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A container's use of one Pod claim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerClaim {
    /// The name of an entry in `spec.resourceClaims`.
    #[serde(default)]
    pub name: String,
    /// Every other field (1.32 added `request`), kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The Pod status fields classic DRA uses, plus everything else in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DraPodStatus {
    /// The names of the claims generated from templates (1.28+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_statuses: Option<Vec<PodResourceClaimStatus>>,
    /// Every other status field, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Which claim was generated for a Pod claim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodResourceClaimStatus {
    /// The name in `spec.resourceClaims`.
    #[serde(default)]
    pub name: String,
    /// The generated claim's name; `None` means no claim was needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_name: Option<String>,
    /// Every other field, kept as read.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl DraPod {
    /// The Pod's claim references.
    pub fn resource_claims(&self) -> &[PodResourceClaim] {
        self.spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_deref())
            .unwrap_or_default()
    }

    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`), if reported.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.extra.get("phase")?.as_str()
    }

    /// Whether the Pod has finished (`Succeeded` or `Failed`): its containers never run
    /// again, so its claims can be released.
    pub fn is_done(&self) -> bool {
        matches!(self.phase(), Some("Succeeded" | "Failed"))
    }

    /// The node the Pod is bound to, if any.
    pub fn node_name(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }

    /// The name of the ResourceClaim behind the Pod claim `pod_claim_name`.
    ///
    /// For a direct reference that is the named claim. For a template it is the generated
    /// claim recorded in `status.resourceClaimStatuses` (1.28+), or `None` while the
    /// resource-claim controller has not created it yet. Kubernetes 1.27 recorded nothing
    /// and named the claim `<pod>-<pod claim>`; see [`legacy_generated_claim_name`](Self::legacy_generated_claim_name).
    pub fn claim_name(&self, pod_claim_name: &str) -> Option<&str> {
        let pod_claim = self
            .resource_claims()
            .iter()
            .find(|c| c.name == pod_claim_name)?;
        if let Some(name) = pod_claim.direct_claim_name() {
            return Some(name);
        }
        pod_claim.template_name()?;
        self.status
            .as_ref()?
            .resource_claim_statuses
            .as_deref()?
            .iter()
            .find(|s| s.name == pod_claim_name)?
            .resource_claim_name
            .as_deref()
    }

    /// The claim behind `pod_claim_name` as a driver that must work on every release looks
    /// for it, and whether it must be checked to be controlled by this pod before use
    /// (`resourceclaim.IsForPod`): a direct reference; the claim recorded in
    /// `status.resourceClaimStatuses` (1.28+); else the name 1.27 gives generated claims,
    /// which on later releases no claim of this pod has.
    pub fn claim_name_any_release(&self, pod_claim_name: &str) -> Option<(String, bool)> {
        let pod_claim = self
            .resource_claims()
            .iter()
            .find(|c| c.name == pod_claim_name)?;
        if let Some(name) = pod_claim.direct_claim_name() {
            return Some((name.to_string(), false));
        }
        pod_claim.template_name()?;
        let name = match self.claim_name(pod_claim_name) {
            Some(name) => name.to_string(),
            None => self.legacy_generated_claim_name(pod_claim_name)?,
        };
        Some((name, true))
    }

    /// Whether `owners` make the object one this pod controls.
    pub fn controls(
        &self,
        owners: Option<&[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]>,
    ) -> bool {
        let Some(uid) = self.metadata.uid.as_deref() else {
            return false;
        };
        owners
            .unwrap_or_default()
            .iter()
            .any(|o| o.uid == uid && o.controller == Some(true))
    }

    /// The name Kubernetes 1.27 gave a claim generated for `pod_claim_name`.
    pub fn legacy_generated_claim_name(&self, pod_claim_name: &str) -> Option<String> {
        let pod = self.metadata.name.as_deref()?;
        Some(format!("{pod}-{pod_claim_name}"))
    }

    /// All containers, init containers first, as the kubelet starts them.
    pub fn all_containers(&self) -> impl Iterator<Item = &ClassicContainer> {
        let spec = self.spec.as_ref();
        let init = spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default();
        let main = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
        init.iter().chain(main)
    }
}

impl ClassicContainer {
    /// The names of the Pod claims this container uses.
    pub fn claim_names(&self) -> impl Iterator<Item = &str> {
        self.resources
            .as_ref()
            .and_then(|r| r.claims.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|c| c.name.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Compiles only if the type works with `kube::Api`; never called.
    #[allow(dead_code)]
    fn usable_with_kube_api(client: kube::Client) -> kube::Api<DraPod> {
        kube::Api::namespaced(client, "ns")
    }

    fn pod(value: Value) -> DraPod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn finds_claims_on_every_release() {
        let p = pod(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pu"},
            "spec": {
                "containers": [],
                "resourceClaims": [
                    {"name": "a", "source": {"resourceClaimName": "shared"}},
                    {"name": "t", "source": {"resourceClaimTemplateName": "tmpl"}},
                    {"name": "u", "source": {"resourceClaimTemplateName": "tmpl"}}
                ]
            },
            "status": {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "p-t-x7k2q"}]}
        }));
        assert_eq!(
            p.claim_name_any_release("a"),
            Some(("shared".into(), false))
        );
        assert_eq!(
            p.claim_name_any_release("t"),
            Some(("p-t-x7k2q".into(), true))
        );
        // Nothing recorded: the 1.27 name, to be checked against its owner.
        assert_eq!(p.claim_name_any_release("u"), Some(("p-u".into(), true)));
        assert_eq!(p.claim_name_any_release("nope"), None);
        let owner = |uid: &str, controller| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: "p".into(),
                uid: uid.into(),
                controller: Some(controller),
                block_owner_deletion: None,
            }
        };
        assert!(p.controls(Some(&[owner("pu", true)])));
        assert!(!p.controls(Some(&[owner("pu", false)])));
        assert!(!p.controls(Some(&[owner("other", true)])));
        assert!(!p.controls(None));
    }

    #[test]
    fn resolves_claim_names() {
        let p = pod(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "containers": [{"name": "c", "resources": {"claims": [{"name": "a"}, {"name": "t"}]}}],
                "resourceClaims": [
                    {"name": "a", "source": {"resourceClaimName": "shared"}},
                    {"name": "t", "source": {"resourceClaimTemplateName": "tmpl"}},
                    {"name": "pending", "source": {"resourceClaimTemplateName": "tmpl"}}
                ]
            },
            "status": {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "p-t-x7k2q"}]}
        }));
        assert_eq!(p.claim_name("a"), Some("shared"));
        assert_eq!(p.claim_name("t"), Some("p-t-x7k2q"));
        assert_eq!(p.claim_name("pending"), None);
        assert_eq!(p.claim_name("missing"), None);
        assert_eq!(p.legacy_generated_claim_name("t").as_deref(), Some("p-t"));
        let used: Vec<_> = p.all_containers().flat_map(|c| c.claim_names()).collect();
        assert_eq!(used, ["a", "t"]);
    }

    #[test]
    fn resolves_claim_names_of_the_1_31_layout() {
        let p = pod(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "containers": [{"name": "c", "resources": {"claims": [{"name": "a"}, {"name": "t"}]}}],
                "resourceClaims": [
                    {"name": "a", "resourceClaimName": "shared"},
                    {"name": "t", "resourceClaimTemplateName": "tmpl"},
                    {"name": "pending", "resourceClaimTemplateName": "tmpl"}
                ]
            },
            "status": {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "p-t-x7k2q"}]}
        }));
        assert_eq!(p.claim_name("a"), Some("shared"));
        assert_eq!(p.claim_name("t"), Some("p-t-x7k2q"));
        assert_eq!(p.claim_name("pending"), None);
        let claims = p.resource_claims();
        assert_eq!(claims[0].direct_claim_name(), Some("shared"));
        assert_eq!(claims[0].template_name(), None);
        assert_eq!(claims[1].template_name(), Some("tmpl"));
        assert!(claims[1].source.is_none());
    }

    #[test]
    fn writes_back_the_layout_it_read() {
        let value = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "c", "resources": {"claims": [{"name": "a", "request": "r"}]}}],
                "resourceClaims": [{"name": "a", "resourceClaimTemplateName": "tmpl"}]
            }
        });
        assert_eq!(serde_json::to_value(pod(value.clone())).unwrap(), value);
    }

    #[test]
    fn keeps_unknown_fields() {
        let value = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox", "futureField": {"x": 1}}],
                "restartPolicy": "Never"
            },
            "status": {"phase": "Pending"}
        });
        assert_eq!(serde_json::to_value(pod(value.clone())).unwrap(), value);
    }
}
