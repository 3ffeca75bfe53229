use fake_dra_api::fault::{
    BindingOutcome, CallFault, DeviceConditionSpec, GetInfoFault, HealthSpec, TaintSpec,
};

use std::collections::BTreeMap;

use super::*;

fn devices() -> Vec<String> {
    (0..4).map(|i| format!("fake-{i}")).collect()
}

fn fault(name: &str, spec: DeviceFaultSpec) -> Fault {
    Fault {
        name: name.into(),
        uid: format!("uid-{name}"),
        generation: 3,
        spec,
    }
}

fn taint(key: &str, effect: TaintEffectSpec) -> Option<TaintSpec> {
    Some(TaintSpec {
        key: key.into(),
        value: None,
        effect,
        via: Default::default(),
    })
}

fn call(action: CallAction, delay: Option<u32>) -> Option<CallFault> {
    Some(CallFault {
        action,
        delay_millis: delay,
        message: None,
    })
}

/// `max` taints a device, the effect None allowed (1.35+).
fn rules(max: usize) -> TaintRules {
    TaintRules::new(max, true)
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_fault_selects_nodes_devices_and_claims() {
    let f = fault(
        "a",
        DeviceFaultSpec {
            nodes: names(&["n1"]),
            devices: names(&["fake-1"]),
            claims: vec![ClaimSelector {
                namespace: "ns".into(),
                name: "c".into(),
            }],
            prepare: call(CallAction::Fail, None),
            ..Default::default()
        },
    );
    let n1 = NodeFaults::resolve("n1", &devices(), std::slice::from_ref(&f));
    let n2 = NodeFaults::resolve("n2", &devices(), &[f]);
    assert!(n2.is_empty());
    assert_eq!(
        n2.prepare("ns", "c", &names(&["fake-1"])),
        CallDecision::Proceed
    );
    assert_eq!(
        n1.prepare("ns", "c", &names(&["fake-0", "fake-1"])),
        CallDecision::Fail {
            fault: "a".into(),
            message: "prepare of claim ns/c fails by DeviceFault a".into()
        }
    );
    assert_eq!(
        n1.prepare("ns", "c", &names(&["fake-0"])),
        CallDecision::Proceed,
        "other device"
    );
    assert_eq!(
        n1.prepare("ns", "d", &names(&["fake-1"])),
        CallDecision::Proceed,
        "other claim"
    );
    assert_eq!(
        n1.unprepare("ns", "c", &names(&["fake-1"])),
        CallDecision::Proceed,
        "prepare only"
    );
}

#[test]
fn delay_and_hang() {
    let faults = [
        fault(
            "a-delay",
            DeviceFaultSpec {
                unprepare: call(CallAction::Delay, Some(250)),
                ..Default::default()
            },
        ),
        fault(
            "b-hang",
            DeviceFaultSpec {
                prepare: call(CallAction::Hang, None),
                ..Default::default()
            },
        ),
    ];
    let n = NodeFaults::resolve("n", &devices(), &faults);
    assert_eq!(
        n.unprepare("x", "y", &[]),
        CallDecision::Delay {
            fault: "a-delay".into(),
            millis: 250
        }
    );
    assert_eq!(
        n.prepare("x", "y", &names(&["fake-3"])),
        CallDecision::Hang {
            fault: "b-hang".into()
        }
    );
}

#[test]
fn taints_add_up_and_are_published_within_the_limit() {
    let faults = [
        fault(
            "a",
            DeviceFaultSpec {
                devices: names(&["fake-0"]),
                taint: taint("k1", TaintEffectSpec::NoSchedule),
                ..Default::default()
            },
        ),
        fault(
            "b",
            DeviceFaultSpec {
                taint: taint("k2", TaintEffectSpec::NoExecute),
                ..Default::default()
            },
        ),
        fault(
            "c",
            DeviceFaultSpec {
                taint: taint("k2", TaintEffectSpec::NoExecute),
                ..Default::default()
            },
        ),
    ];
    let n = NodeFaults::resolve("n", &devices(), &faults);
    let plain: Vec<SliceDevice> = devices().into_iter().map(SliceDevice::new).collect();
    let published = n.overlay(&plain, "drv", rules(4));
    assert_eq!(published[0].taints.len(), 2, "k1 and k2, k2 once");
    assert_eq!(published[1].taints.len(), 1);
    assert_eq!(published[1].taints[0].effect, TaintEffect::NoExecute);
    // With room for one taint a device, fault a's (first by name) shows on fake-0 and b's
    // is reported dropped there.
    let one = n.overlay(&plain, "drv", rules(1));
    assert_eq!(one[0].taints.len(), 1);
    assert_eq!(one[0].taints[0].key, "k1");
    let reports = n.reports(rules(1), Default::default());
    let b = &reports.iter().find(|(f, _)| f == "b").unwrap().1;
    assert!(
        b.problems[0].contains("not published on fake-0:"),
        "{:?}",
        b.problems
    );
    assert!(
        b.problems[0].contains("at most 1 taints"),
        "{:?}",
        b.problems
    );
    assert!(
        reports
            .iter()
            .find(|(f, _)| f == "a")
            .unwrap()
            .1
            .problems
            .is_empty()
    );
}

#[test]
fn a_none_taint_is_left_out_where_the_release_refuses_it_and_the_status_says_why() {
    let faults = [
        fault(
            "a-none",
            DeviceFaultSpec {
                taint: taint("info", TaintEffectSpec::None),
                ..Default::default()
            },
        ),
        fault(
            "b-noschedule",
            DeviceFaultSpec {
                taint: taint("k", TaintEffectSpec::NoSchedule),
                ..Default::default()
            },
        ),
    ];
    let n = NodeFaults::resolve("n", &devices(), &faults);
    let plain: Vec<SliceDevice> = devices().into_iter().map(SliceDevice::new).collect();
    // 1.34: NoSchedule and NoExecute only (a None taint would fail the whole slice write).
    let on_1_34 = TaintRules::of(dra_kubelet_plugin::device::CounterLayout::WithDevices);
    let published = n.overlay(&plain, "drv", on_1_34);
    for d in &published {
        let effects: Vec<TaintEffect> = d.taints.iter().map(|t| t.effect).collect();
        assert_eq!(effects, vec![TaintEffect::NoSchedule], "{}", d.name);
    }
    let reports: BTreeMap<String, NodeFaultStatus> =
        n.reports(on_1_34, Default::default()).into_iter().collect();
    assert_eq!(
        reports["a-none"].problems,
        vec![
            "taint info not published: the effect None needs Kubernetes 1.35 or later (this release accepts only NoSchedule and NoExecute)"
        ]
    );
    assert!(reports["b-noschedule"].problems.is_empty());
    // 1.35+: published.
    let on_1_35 = TaintRules::of(dra_kubelet_plugin::device::CounterLayout::Separate);
    assert_eq!(n.overlay(&plain, "drv", on_1_35)[0].taints.len(), 2);
    assert!(
        n.reports(on_1_35, Default::default())
            .iter()
            .all(|(_, r)| r.problems.is_empty())
    );
}

#[test]
fn binding_faults_give_the_devices_binding_conditions() {
    let faults = [fault(
        "a",
        DeviceFaultSpec {
            devices: names(&["fake-2"]),
            binding: Some(BindingSpec {
                outcome: BindingOutcome::Fail,
                after_seconds: 5,
                binds_to_node: true,
            }),
            ..Default::default()
        },
    )];
    let n = NodeFaults::resolve("n", &devices(), &faults);
    let plain: Vec<SliceDevice> = devices().into_iter().map(SliceDevice::new).collect();
    let out = n.overlay(&plain, "fake.resource.3-shake.com", rules(4));
    assert_eq!(out[1].binding, None);
    assert_eq!(
        out[2].binding,
        Some(
            BindingConditions::new(
                vec!["fake.resource.3-shake.com/attached".into()],
                vec!["fake.resource.3-shake.com/attach-failed".into()],
            )
            .binds_to_node(true)
        )
    );
    assert_eq!(n.binding("fake-2").unwrap().1.outcome, BindingOutcome::Fail);
}

#[test]
fn conflicts_unknown_devices_and_invalid_specs_are_reported_per_fault() {
    let unhealthy = |status| {
        Some(HealthSpec {
            status,
            message: None,
        })
    };
    let faults = [
        fault(
            "a",
            DeviceFaultSpec {
                health: unhealthy(HealthStatus::Unhealthy),
                get_info: Some(GetInfoFault::default()),
                ..Default::default()
            },
        ),
        fault(
            "b",
            DeviceFaultSpec {
                devices: names(&["fake-1", "fake-9"]),
                health: unhealthy(HealthStatus::Unknown),
                ..Default::default()
            },
        ),
        fault(
            "c",
            DeviceFaultSpec {
                get_info: Some(GetInfoFault {
                    message: Some("nope".into()),
                }),
                ..Default::default()
            },
        ),
        fault("d", DeviceFaultSpec::default()),
        fault(
            "e",
            DeviceFaultSpec {
                device_status: Some(DeviceStatusSpec {
                    conditions: vec![DeviceConditionSpec {
                        type_: "Ready".into(),
                        ..Default::default()
                    }],
                    data: None,
                }),
                ..Default::default()
            },
        ),
    ];
    let n = NodeFaults::resolve("n", &devices(), &faults);
    assert_eq!(
        n.health("fake-1").0,
        HealthStatus::Unhealthy,
        "a comes first"
    );
    assert_eq!(
        n.get_info().unwrap(),
        "GetInfo fails on node n by DeviceFault a"
    );
    assert_eq!(n.device_status("fake-3").unwrap().0, "e");
    let reports: BTreeMap<String, NodeFaultStatus> = n
        .reports(rules(4), Default::default())
        .into_iter()
        .collect();
    assert_eq!(reports.len(), 5);
    assert!(reports["a"].problems.is_empty());
    assert_eq!(reports["a"].effects, ["health", "getInfo"]);
    assert_eq!(reports["a"].devices.len(), 4);
    assert_eq!(reports["a"].observed_generation, 3);
    let b = &reports["b"].problems;
    assert!(
        b[0].contains(
            "device \"fake-9\" is not a device of node n (fake-0, fake-1, fake-2, fake-3)"
        ),
        "{b:?}"
    );
    assert!(
        b[1].contains("health is also set by DeviceFault a"),
        "{b:?}"
    );
    assert_eq!(reports["b"].devices, ["fake-1"]);
    assert!(reports["c"].problems[0].contains("getInfo is also set by DeviceFault a"));
    assert!(reports["d"].problems[0].starts_with("not applied: spec: names no effect"));
}

#[test]
fn a_taint_the_api_server_would_refuse_is_not_applied_and_the_status_says_why() {
    let faults = [
        fault(
            "bad-key",
            DeviceFaultSpec {
                taint: taint("!!bad key!!", TaintEffectSpec::NoSchedule),
                ..Default::default()
            },
        ),
        fault(
            "bad-value",
            DeviceFaultSpec {
                taint: Some(TaintSpec {
                    key: "example.com/rack".into(),
                    value: Some("seven and a half".into()),
                    effect: TaintEffectSpec::NoExecute,
                    via: Default::default(),
                }),
                ..Default::default()
            },
        ),
    ];
    let n = NodeFaults::resolve("n", &devices(), &faults);
    assert!(n.is_empty(), "neither is in force");
    let plain: Vec<SliceDevice> = devices().into_iter().map(SliceDevice::new).collect();
    assert!(
        n.overlay(&plain, "drv", rules(4))
            .iter()
            .all(|d| d.taints.is_empty()),
        "nothing reaches the slice"
    );
    let reports: BTreeMap<String, NodeFaultStatus> = n
        .reports(rules(4), Default::default())
        .into_iter()
        .collect();
    let key = &reports["bad-key"].problems;
    assert!(
        key[0].starts_with("not applied: spec.taint.key: \"!!bad key!!\" is not a qualified name"),
        "{key:?}"
    );
    let value = &reports["bad-value"].problems;
    assert!(
        value[0].starts_with(
            "not applied: spec.taint.value: \"seven and a half\" is not a label value"
        ),
        "{value:?}"
    );
}

#[test]
fn names_in_the_status_are_bounded_whatever_the_fault_names() {
    let long = "d".repeat(1 << 20);
    let mut many: Vec<String> = (0..200).map(|i| format!("{long}{i}")).collect();
    many.push("fake-9".into());
    let f = fault(
        "huge",
        DeviceFaultSpec {
            devices: many,
            health: Some(HealthSpec::default()),
            ..Default::default()
        },
    );
    let reports = NodeFaults::resolve("n", &devices(), &[f]).reports(rules(4), Default::default());
    let problems = &reports[0].1.problems;
    assert_eq!(problems.len(), 1, "one problem for every unknown device");
    let p = &problems[0];
    assert!(p.len() < 2_000, "{} bytes", p.len());
    assert!(
        p.starts_with(&format!("devices \"{}\"...", "d".repeat(64))),
        "{p}"
    );
    assert!(
        p.contains(" and 191 more are not devices of node n (fake-0"),
        "{p}"
    );
    let one = fault(
        "one",
        DeviceFaultSpec {
            devices: vec![long],
            health: Some(HealthSpec::default()),
            ..Default::default()
        },
    );
    let reports =
        NodeFaults::resolve("n", &devices(), &[one]).reports(rules(4), Default::default());
    assert!(reports[0].1.problems[0].len() < 300);
}

#[test]
fn prepare_faults_conflict_only_when_their_claims_overlap() {
    let on = |ns: &str| DeviceFaultSpec {
        claims: vec![ClaimSelector {
            namespace: ns.into(),
            name: String::new(),
        }],
        prepare: call(CallAction::Fail, None),
        ..Default::default()
    };
    let n = NodeFaults::resolve(
        "n",
        &devices(),
        &[
            fault("a", on("x")),
            fault("b", on("y")),
            fault("c", on("x")),
        ],
    );
    let reports: BTreeMap<String, NodeFaultStatus> = n
        .reports(rules(4), Default::default())
        .into_iter()
        .collect();
    assert!(reports["b"].problems.is_empty());
    assert!(reports["c"].problems[0].contains("prepare is also set by DeviceFault a"));
}
