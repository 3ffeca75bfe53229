//! How server-side apply merges each list of a type: atomically, as a set, or as a map by
//! key fields — what structured-merge-diff reads from the type's OpenAPI schema.
//!
//! Custom resources say it with `x-kubernetes-list-type` / `x-kubernetes-list-map-keys`
//! in their `openAPIV3Schema` (apiextensions-apiserver builds the SMD schema from it;
//! a list without the extension is atomic). Built-in types carry no schema here, so the
//! lists they mark `+listType=set|map` are named below; every other list of a built-in
//! type merges atomically, which is upstream's answer only for lists marked
//! `+listType=atomic` or not marked at all.

use serde_json::Value;

use super::super::registry::ResourceType;

/// How apply merges one list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole, owned as one field.
    Atomic,
    /// Scalars, each owned by value.
    Set,
    /// Objects, each owned by the values of these key fields.
    Map(Vec<String>),
}

/// `ObjectMeta`'s lists, the same in every type (k8s.io/apimachinery
/// pkg/apis/meta/v1/types.go: `Finalizers` `+listType=set`, `OwnerReferences`
/// `+listType=map +listMapKey=uid`).
const OBJECT_META: &[(&str, &str)] = &[
    ("metadata.finalizers", "set"),
    ("metadata.ownerReferences", "uid"),
];

/// The non-atomic lists of the built-in types the emulator's clients apply to, by
/// group, plural, and path (`[]` stands for a list's items); the value is `set` or the
/// map's key fields. Upstream: k8s.io/api resource/{v1,v1beta1,v1beta2,v1alpha3}
/// `ResourceClaimStatus` — `ReservedFor` `+listType=map +listMapKey=uid`, `Devices`
/// `+listType=map +listMapKey=driver +listMapKey=device +listMapKey=pool
/// +listMapKey=shareID`, `AllocatedDeviceStatus.Conditions` `+listType=map
/// +listMapKey=type`.
const BUILT_IN: &[(&str, &str, &str, &str)] = &[
    (
        "resource.k8s.io",
        "resourceclaims",
        "status.reservedFor",
        "uid",
    ),
    (
        "resource.k8s.io",
        "resourceclaims",
        "status.devices",
        "driver,device,pool,shareID",
    ),
    (
        "resource.k8s.io",
        "resourceclaims",
        "status.devices[].conditions",
        "type",
    ),
];

/// A position in a type's schema while walking an object: the CRD schema node (if the
/// type has one) and the path of field names, `[]` for list items.
#[derive(Debug, Clone)]
pub struct Shape<'a> {
    node: Option<&'a Value>,
    path: String,
    group: &'a str,
    plural: &'a str,
}

impl<'a> Shape<'a> {
    /// The root of `rt`'s objects in their stored layout (a CRD's storage version, the
    /// first of `versions`).
    pub fn of(rt: &'a ResourceType) -> Self {
        let node = rt
            .versions
            .first()
            .and_then(|v| rt.schemas.get(v))
            .filter(|_| rt.custom);
        Self {
            node,
            path: String::new(),
            group: &rt.group,
            plural: &rt.plural,
        }
    }

    /// A type with no schema: every list atomic but `ObjectMeta`'s.
    #[cfg(test)]
    pub fn untyped() -> Self {
        Self {
            node: None,
            path: String::new(),
            group: "",
            plural: "",
        }
    }

    /// A built-in type: its lists by [`BUILT_IN`].
    #[cfg(test)]
    pub fn built_in(group: &'a str, plural: &'a str) -> Self {
        Self {
            group,
            plural,
            ..Self::untyped()
        }
    }

    /// A custom type with this `openAPIV3Schema`.
    #[cfg(test)]
    pub fn custom(schema: &'a Value) -> Self {
        Self {
            node: Some(schema),
            ..Self::untyped()
        }
    }

    pub fn field(&self, name: &str) -> Self {
        let node = self.node.and_then(|n| {
            n.get("properties")
                .and_then(|p| p.get(name))
                .or_else(|| n.get("additionalProperties").filter(|a| a.is_object()))
        });
        let path = if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        };
        Self {
            node,
            path,
            ..*self
        }
    }

    pub fn items(&self) -> Self {
        Self {
            node: self.node.and_then(|n| n.get("items")),
            path: format!("{}[]", self.path),
            ..*self
        }
    }

    /// The list type of the list at this position.
    pub fn list_type(&self) -> ListType {
        let built_in = BUILT_IN
            .iter()
            .filter(|(group, plural, _, _)| (*group, *plural) == (self.group, self.plural))
            .map(|(_, _, path, list)| (*path, *list))
            .chain(OBJECT_META.iter().copied())
            .find(|(path, _)| *path == self.path);
        if let Some((_, list)) = built_in {
            return match list {
                "set" => ListType::Set,
                keys => ListType::Map(keys.split(',').map(str::to_string).collect()),
            };
        }
        let Some(node) = self.node else {
            return ListType::Atomic;
        };
        match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(
                node.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
            ),
            _ => ListType::Atomic,
        }
    }
}
