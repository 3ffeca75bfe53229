//! The `resource.k8s.io/v1` and `v1beta1` ResourceSlice objects of a pool's slice, and
//! back to the neutral form. Fields of a kind we do not know are left out when reading,
//! so such a slice never compares equal to ours and gets rewritten; `timeAdded` of a
//! taint is the API server's and not compared.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::{v1, v1beta1};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

use super::{Desired, PublishedSlice, SliceContent};
use crate::model::{
    Attribute, BindingConditions, Capacity, CounterConsumption, CounterSet, DeviceTaint,
    RequestPolicy, SliceDevice, TaintEffect, ValidRange,
};
use crate::quantity::Quantity;

fn meta(
    desired: &Desired,
    name: Option<&(String, Option<String>)>,
    owner: Option<&OwnerReference>,
) -> ObjectMeta {
    ObjectMeta {
        name: name.map(|(n, _)| n.clone()),
        generate_name: name.is_none().then(|| desired.generate_name()),
        resource_version: name.and_then(|(_, rv)| rv.clone()),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..Default::default()
    }
}

fn api_quantity(q: &Quantity) -> ApiQuantity {
    ApiQuantity(q.as_str().to_owned())
}

fn quantity(q: &ApiQuantity) -> Quantity {
    Quantity::new(q.0.clone())
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn non_empty_map<K, V>(m: BTreeMap<K, V>) -> Option<BTreeMap<K, V>> {
    (!m.is_empty()).then_some(m)
}

/// The value of an API attribute; `None` when it sets no (or an unknown) kind.
fn attribute_from_parts(
    int: Option<i64>,
    string: Option<&String>,
    version: Option<&String>,
    bool: Option<bool>,
) -> Option<Attribute> {
    match (int, string, version, bool) {
        (Some(i), None, None, None) => Some(Attribute::Int(i)),
        (None, Some(s), None, None) => Some(Attribute::String(s.clone())),
        (None, None, Some(v), None) => Some(Attribute::Version(v.clone())),
        (None, None, None, Some(b)) => Some(Attribute::Bool(b)),
        _ => None,
    }
}

/// Conversions of the parts both versions spell alike, for one version's types.
macro_rules! shared_conversions {
    ($module:ident, $ver:ident) => {
        mod $module {
            use super::*;

            pub fn attribute(a: &Attribute) -> $ver::DeviceAttribute {
                match a {
                    Attribute::Int(i) => $ver::DeviceAttribute {
                        int: Some(*i),
                        ..Default::default()
                    },
                    Attribute::String(s) => $ver::DeviceAttribute {
                        string: Some(s.clone()),
                        ..Default::default()
                    },
                    Attribute::Version(v) => $ver::DeviceAttribute {
                        version: Some(v.clone()),
                        ..Default::default()
                    },
                    Attribute::Bool(b) => $ver::DeviceAttribute {
                        bool: Some(*b),
                        ..Default::default()
                    },
                }
            }

            pub fn attributes(
                a: &BTreeMap<String, Attribute>,
            ) -> Option<BTreeMap<String, $ver::DeviceAttribute>> {
                non_empty_map(a.iter().map(|(k, v)| (k.clone(), attribute(v))).collect())
            }

            pub fn attributes_back(
                a: Option<&BTreeMap<String, $ver::DeviceAttribute>>,
            ) -> BTreeMap<String, Attribute> {
                a.into_iter()
                    .flatten()
                    .filter_map(|(k, a)| {
                        attribute_from_parts(a.int, a.string.as_ref(), a.version.as_ref(), a.bool)
                            .map(|v| (k.clone(), v))
                    })
                    .collect()
            }

            pub fn capacity(
                c: &BTreeMap<String, Capacity>,
            ) -> Option<BTreeMap<String, $ver::DeviceCapacity>> {
                non_empty_map(
                    c.iter()
                        .map(|(k, c)| {
                            (
                                k.clone(),
                                $ver::DeviceCapacity {
                                    value: api_quantity(&c.value),
                                    request_policy: c.request_policy.as_ref().map(|p| {
                                        $ver::CapacityRequestPolicy {
                                            default: p.default.as_ref().map(api_quantity),
                                            valid_values: non_empty(
                                                p.valid_values.iter().map(api_quantity).collect(),
                                            ),
                                            valid_range: p.valid_range.as_ref().map(|r| {
                                                $ver::CapacityRequestPolicyRange {
                                                    min: api_quantity(&r.min),
                                                    max: r.max.as_ref().map(api_quantity),
                                                    step: r.step.as_ref().map(api_quantity),
                                                }
                                            }),
                                        }
                                    }),
                                },
                            )
                        })
                        .collect(),
                )
            }

            pub fn capacity_back(
                c: Option<&BTreeMap<String, $ver::DeviceCapacity>>,
            ) -> BTreeMap<String, Capacity> {
                c.into_iter()
                    .flatten()
                    .map(|(k, c)| {
                        (
                            k.clone(),
                            Capacity {
                                value: quantity(&c.value),
                                request_policy: c.request_policy.as_ref().map(|p| RequestPolicy {
                                    default: p.default.as_ref().map(quantity),
                                    valid_values: p
                                        .valid_values
                                        .iter()
                                        .flatten()
                                        .map(quantity)
                                        .collect(),
                                    valid_range: p.valid_range.as_ref().map(|r| ValidRange {
                                        min: quantity(&r.min),
                                        max: r.max.as_ref().map(quantity),
                                        step: r.step.as_ref().map(quantity),
                                    }),
                                }),
                            },
                        )
                    })
                    .collect()
            }

            pub fn counters(c: &BTreeMap<String, Quantity>) -> BTreeMap<String, $ver::Counter> {
                c.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            $ver::Counter {
                                value: api_quantity(v),
                            },
                        )
                    })
                    .collect()
            }

            pub fn counters_back(
                c: &BTreeMap<String, $ver::Counter>,
            ) -> BTreeMap<String, Quantity> {
                c.iter()
                    .map(|(k, v)| (k.clone(), quantity(&v.value)))
                    .collect()
            }

            pub fn consumptions(
                c: &[CounterConsumption],
            ) -> Option<Vec<$ver::DeviceCounterConsumption>> {
                non_empty(
                    c.iter()
                        .map(|c| $ver::DeviceCounterConsumption {
                            counter_set: c.counter_set.clone(),
                            counters: counters(&c.counters),
                        })
                        .collect(),
                )
            }

            pub fn consumptions_back(
                c: Option<&Vec<$ver::DeviceCounterConsumption>>,
            ) -> Vec<CounterConsumption> {
                c.into_iter()
                    .flatten()
                    .map(|c| CounterConsumption {
                        counter_set: c.counter_set.clone(),
                        counters: counters_back(&c.counters),
                    })
                    .collect()
            }

            pub fn taints(t: &[DeviceTaint]) -> Option<Vec<$ver::DeviceTaint>> {
                non_empty(
                    t.iter()
                        .map(|t| $ver::DeviceTaint {
                            key: t.key.clone(),
                            value: t.value.clone(),
                            effect: t.effect.as_str().to_owned(),
                            time_added: None,
                        })
                        .collect(),
                )
            }

            /// A taint of an effect we do not know is kept as `None`-effect: it must not
            /// compare equal to anything we publish, nor be dropped silently.
            pub fn taints_back(t: Option<&Vec<$ver::DeviceTaint>>) -> Vec<DeviceTaint> {
                t.into_iter()
                    .flatten()
                    .map(|t| DeviceTaint {
                        key: t.key.clone(),
                        value: t.value.clone().filter(|v| !v.is_empty()),
                        effect: TaintEffect::parse(&t.effect).unwrap_or(TaintEffect::None),
                    })
                    .collect()
            }

            pub fn counter_sets(s: &[CounterSet]) -> Option<Vec<$ver::CounterSet>> {
                non_empty(
                    s.iter()
                        .map(|s| $ver::CounterSet {
                            name: s.name.clone(),
                            counters: counters(&s.counters),
                        })
                        .collect(),
                )
            }

            pub fn counter_sets_back(s: Option<&Vec<$ver::CounterSet>>) -> Vec<CounterSet> {
                s.into_iter()
                    .flatten()
                    .map(|s| CounterSet {
                        name: s.name.clone(),
                        counters: counters_back(&s.counters),
                    })
                    .collect()
            }
        }
    };
}

shared_conversions!(v1_parts, v1);
shared_conversions!(v1beta1_parts, v1beta1);

fn binding_back(
    conditions: Option<&Vec<String>>,
    failure: Option<&Vec<String>>,
    binds_to_node: Option<bool>,
) -> Option<BindingConditions> {
    let conditions = conditions.cloned().unwrap_or_default();
    let failure_conditions = failure.cloned().unwrap_or_default();
    let binds_to_node = binds_to_node.unwrap_or(false);
    (!conditions.is_empty() || !failure_conditions.is_empty() || binds_to_node).then_some(
        BindingConditions {
            conditions,
            failure_conditions,
            binds_to_node,
        },
    )
}

/// The `resource.k8s.io/v1` slice `content` of a pool of `slice_count` slices:
/// attributes directly on the device.
pub fn to_v1(
    desired: &Desired,
    update: Option<&(String, Option<String>)>,
    content: &SliceContent,
    generation: i64,
    slice_count: usize,
    owner: Option<&OwnerReference>,
) -> v1::ResourceSlice {
    v1::ResourceSlice {
        metadata: meta(desired, update, owner),
        spec: v1::ResourceSliceSpec {
            driver: desired.driver.clone(),
            node_name: Some(desired.node_name.clone()),
            pool: v1::ResourcePool {
                name: desired.pool.clone(),
                generation,
                resource_slice_count: i64::try_from(slice_count).unwrap_or(i64::MAX),
            },
            // A counter-set slice of 1.35+ has no `devices` at all (only one of the two
            // may be set); every other slice lists its devices, even none.
            devices: (content.counter_sets.is_empty() || !content.devices.is_empty()).then(|| {
                content
                    .devices
                    .iter()
                    .map(|d| v1::Device {
                        name: d.name.clone(),
                        attributes: v1_parts::attributes(&d.attributes),
                        capacity: v1_parts::capacity(&d.capacity),
                        consumes_counters: v1_parts::consumptions(&d.consumes_counters),
                        allow_multiple_allocations: d.allow_multiple_allocations.then_some(true),
                        taints: v1_parts::taints(&d.taints),
                        binding_conditions: d
                            .binding
                            .as_ref()
                            .and_then(|b| non_empty(b.conditions.clone())),
                        binding_failure_conditions: d
                            .binding
                            .as_ref()
                            .and_then(|b| non_empty(b.failure_conditions.clone())),
                        binds_to_node: d
                            .binding
                            .as_ref()
                            .and_then(|b| b.binds_to_node.then_some(true)),
                        ..Default::default()
                    })
                    .collect()
            }),
            shared_counters: v1_parts::counter_sets(&content.counter_sets),
            ..Default::default()
        },
    }
}

/// The `resource.k8s.io/v1beta1` slice: attributes under `devices[].basic`.
pub fn to_v1beta1(
    desired: &Desired,
    update: Option<&(String, Option<String>)>,
    content: &SliceContent,
    generation: i64,
    slice_count: usize,
    owner: Option<&OwnerReference>,
) -> v1beta1::ResourceSlice {
    v1beta1::ResourceSlice {
        metadata: meta(desired, update, owner),
        spec: v1beta1::ResourceSliceSpec {
            driver: desired.driver.clone(),
            node_name: Some(desired.node_name.clone()),
            pool: v1beta1::ResourcePool {
                name: desired.pool.clone(),
                generation,
                resource_slice_count: i64::try_from(slice_count).unwrap_or(i64::MAX),
            },
            devices: (content.counter_sets.is_empty() || !content.devices.is_empty()).then(|| {
                content
                    .devices
                    .iter()
                    .map(|d| v1beta1::Device {
                        name: d.name.clone(),
                        basic: Some(v1beta1::BasicDevice {
                            attributes: v1beta1_parts::attributes(&d.attributes),
                            capacity: v1beta1_parts::capacity(&d.capacity),
                            consumes_counters: v1beta1_parts::consumptions(&d.consumes_counters),
                            allow_multiple_allocations: d
                                .allow_multiple_allocations
                                .then_some(true),
                            taints: v1beta1_parts::taints(&d.taints),
                            binding_conditions: d
                                .binding
                                .as_ref()
                                .and_then(|b| non_empty(b.conditions.clone())),
                            binding_failure_conditions: d
                                .binding
                                .as_ref()
                                .and_then(|b| non_empty(b.failure_conditions.clone())),
                            binds_to_node: d
                                .binding
                                .as_ref()
                                .and_then(|b| b.binds_to_node.then_some(true)),
                            ..Default::default()
                        }),
                    })
                    .collect()
            }),
            shared_counters: v1beta1_parts::counter_sets(&content.counter_sets),
            ..Default::default()
        },
    }
}

/// A `v1` slice in neutral form.
pub fn from_v1(s: &v1::ResourceSlice) -> PublishedSlice {
    PublishedSlice {
        name: s.metadata.name.clone().unwrap_or_default(),
        resource_version: s.metadata.resource_version.clone(),
        driver: s.spec.driver.clone(),
        node_name: s.spec.node_name.clone(),
        pool: s.spec.pool.name.clone(),
        generation: s.spec.pool.generation,
        slice_count: s.spec.pool.resource_slice_count,
        content: SliceContent {
            devices: s
                .spec
                .devices
                .iter()
                .flatten()
                .map(|d| SliceDevice {
                    name: d.name.clone(),
                    attributes: v1_parts::attributes_back(d.attributes.as_ref()),
                    capacity: v1_parts::capacity_back(d.capacity.as_ref()),
                    consumes_counters: v1_parts::consumptions_back(d.consumes_counters.as_ref()),
                    allow_multiple_allocations: d.allow_multiple_allocations.unwrap_or(false),
                    taints: v1_parts::taints_back(d.taints.as_ref()),
                    binding: binding_back(
                        d.binding_conditions.as_ref(),
                        d.binding_failure_conditions.as_ref(),
                        d.binds_to_node,
                    ),
                })
                .collect(),
            counter_sets: v1_parts::counter_sets_back(s.spec.shared_counters.as_ref()),
        },
    }
}

/// A `v1beta1` slice in neutral form.
pub fn from_v1beta1(s: &v1beta1::ResourceSlice) -> PublishedSlice {
    PublishedSlice {
        name: s.metadata.name.clone().unwrap_or_default(),
        resource_version: s.metadata.resource_version.clone(),
        driver: s.spec.driver.clone(),
        node_name: s.spec.node_name.clone(),
        pool: s.spec.pool.name.clone(),
        generation: s.spec.pool.generation,
        slice_count: s.spec.pool.resource_slice_count,
        content: SliceContent {
            devices: s
                .spec
                .devices
                .iter()
                .flatten()
                .map(|d| {
                    let b = d.basic.clone().unwrap_or_default();
                    SliceDevice {
                        name: d.name.clone(),
                        attributes: v1beta1_parts::attributes_back(b.attributes.as_ref()),
                        capacity: v1beta1_parts::capacity_back(b.capacity.as_ref()),
                        consumes_counters: v1beta1_parts::consumptions_back(
                            b.consumes_counters.as_ref(),
                        ),
                        allow_multiple_allocations: b.allow_multiple_allocations.unwrap_or(false),
                        taints: v1beta1_parts::taints_back(b.taints.as_ref()),
                        binding: binding_back(
                            b.binding_conditions.as_ref(),
                            b.binding_failure_conditions.as_ref(),
                            b.binds_to_node,
                        ),
                    }
                })
                .collect(),
            counter_sets: v1beta1_parts::counter_sets_back(s.spec.shared_counters.as_ref()),
        },
    }
}
