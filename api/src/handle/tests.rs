use super::*;
use proptest::prelude::*;

const ID_A: &str = "FAKE-0f8e2a34-1b6c-4d2e-9a7f-3c5b8d1e6f20";
const ID_B: &str = "FAKE-7a1c9e55-2d3b-4f60-8e1a-b4c2d9f07e13";

fn sample() -> AllocationHandle {
    AllocationHandle {
        node_name: "node-1".into(),
        model: "fake-x".into(),
        split: 2,
        devices: vec![ID_A.into(), ID_B.into()],
    }
}

fn with(patch: impl FnOnce(&mut Map<String, Value>)) -> String {
    let mut value: Value = serde_json::from_str(&sample().to_json()).unwrap();
    patch(value.as_object_mut().unwrap());
    value.to_string()
}

fn err(input: &str) -> String {
    AllocationHandle::parse(input).unwrap_err().to_string()
}

#[test]
fn the_documented_format() {
    assert_eq!(
        sample().to_json(),
        format!(
            r#"{{"apiVersion":"fake.resource.3-shake.com/v1alpha1","devices":["{ID_A}","{ID_B}"],"kind":"AllocationHandle","model":"fake-x","nodeName":"node-1","split":2}}"#
        )
    );
    assert_eq!(sample().child_count(), 4);
}

#[test]
fn accepts_whitespace_and_any_key_order() {
    let input = format!(
        "\n{{ \"split\": 2, \"devices\": [\"{ID_A}\", \"{ID_B}\"], \"model\": \"fake-x\",\n \"nodeName\": \"node-1\", \"kind\": \"AllocationHandle\", \"apiVersion\": \"{API_VERSION}\" }}\n"
    );
    assert_eq!(AllocationHandle::parse(&input).unwrap(), sample());
}

#[test]
fn empty_input() {
    assert_eq!(err(""), "allocation handle is empty");
    assert_eq!(err("  \n"), "allocation handle is empty");
}

#[test]
fn not_json() {
    assert_eq!(
        AllocationHandle::parse("{\"apiVersion\": ]}").unwrap_err(),
        HandleError::NotJson {
            message: "expected value".into(),
            line: 1,
            column: 16
        }
    );
    assert_eq!(
        err("FAKE-1 on node-1"),
        "allocation handle is not JSON: expected value at line 1 column 1"
    );
    assert_eq!(
        err("[1]"),
        "allocation handle must be a JSON object, got an array"
    );
}

#[test]
fn versions() {
    assert_eq!(
        err(&with(|m| {
            m.remove("apiVersion");
        })),
        "allocation handle has no apiVersion; supported: fake.resource.3-shake.com/v1alpha1"
    );
    assert_eq!(
        err(&with(|m| {
            m.insert("apiVersion".into(), "fake.resource.3-shake.com/v2".into());
        })),
        "allocation handle apiVersion \"fake.resource.3-shake.com/v2\" is not supported; supported: fake.resource.3-shake.com/v1alpha1"
    );
    assert!(
        err(&with(|m| {
            m.insert("kind".into(), "Other".into());
        }))
        .contains("field kind: must be \"AllocationHandle\"")
    );
}

#[test]
fn missing_unknown_and_mistyped_fields() {
    for field in ["kind", "nodeName", "model", "split", "devices"] {
        assert_eq!(
            err(&with(|m| {
                m.remove(field);
            })),
            format!("allocation handle has no {field}")
        );
    }
    assert!(
        err(&with(|m| {
            m.insert("extra".into(), 1.into());
        }))
        .starts_with("allocation handle has unknown field \"extra\"")
    );
    assert_eq!(
        err(&with(|m| {
            m.insert("nodeName".into(), 7.into());
        })),
        "allocation handle field nodeName: must be a string, got a number"
    );
    assert_eq!(
        err(&with(|m| {
            m.insert("devices".into(), json!([ID_A, 1]));
        })),
        "allocation handle field devices: must be an array of strings, got a number"
    );
    assert_eq!(
        err(&with(|m| {
            m.insert("split".into(), "2".into());
        })),
        "allocation handle field split: must be a positive integer, got a string"
    );
}

#[test]
fn bad_values() {
    assert_eq!(
        err(&with(|m| {
            m.insert("devices".into(), json!([]));
        })),
        "allocation handle lists no devices"
    );
    assert_eq!(
        err(&with(|m| {
            m.insert("devices".into(), json!([ID_A, ID_B, ID_A]));
        })),
        format!("allocation handle lists device {ID_A} more than once")
    );
    assert_eq!(
        err(&with(|m| {
            m.insert("devices".into(), json!(["GPU-0"]));
        })),
        "allocation handle device id \"GPU-0\" is not of the form FAKE-<uuid>"
    );
    let ids: Vec<String> = (0..129)
        .map(|i| format!("FAKE-00000000-0000-0000-0000-{i:012}"))
        .collect();
    assert_eq!(
        err(&with(|m| {
            m.insert("devices".into(), json!(ids));
        })),
        "allocation handle lists 129 devices, more than the 128 a claim may have"
    );
    for (split, shown) in [(json!(0), 0), (json!(65), 65), (json!(-1), -1)] {
        assert_eq!(
            err(&with(|m| {
                m.insert("split".into(), split);
            })),
            format!("allocation handle split must be between 1 and 64, got {shown}")
        );
    }
    assert!(
        err(&with(|m| {
            m.insert("nodeName".into(), "Node_1".into());
        }))
        .contains("is not a DNS subdomain")
    );
    assert!(
        err(&with(|m| {
            m.insert("model".into(), "".into());
        }))
        .contains("field model: must not be empty")
    );
}

#[test]
fn too_large_is_refused_before_parsing() {
    // 20 KiB of garbage: if it were parsed first, the error would be NotJson.
    let input = "x".repeat(20 * 1024);
    assert_eq!(
        AllocationHandle::parse(&input).unwrap_err(),
        HandleError::TooLarge {
            size: 20 * 1024,
            max: 16384
        }
    );
}

#[test]
fn the_largest_claim_fits() {
    let handle = AllocationHandle {
        node_name: format!("{}.{}", "n".repeat(126), "n".repeat(126)),
        model: "m".repeat(63),
        split: 64,
        devices: (0..128)
            .map(|i| format!("FAKE-ffffffff-ffff-ffff-ffff-{i:012}"))
            .collect(),
    };
    assert_eq!(handle.node_name.len(), 253);
    assert!(handle.devices.iter().all(|d| d.len() == DEVICE_ID_LEN));
    let json = handle.to_json();
    assert!(json.len() < MAX_HANDLE_BYTES, "{} bytes", json.len());
    assert_eq!(AllocationHandle::parse(&json).unwrap(), handle);
}

fn device_id() -> impl Strategy<Value = String> {
    "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
        .prop_map(|uuid| format!("{DEVICE_ID_PREFIX}{uuid}"))
}

fn valid_handle() -> impl Strategy<Value = AllocationHandle> {
    (
        "[a-z0-9]([a-z0-9.-]{0,60}[a-z0-9])?",
        "[A-Za-z0-9._-]{1,63}",
        1..=64u32,
        proptest::collection::hash_set(device_id(), 1..=128),
    )
        .prop_map(|(node_name, model, split, devices)| AllocationHandle {
            node_name,
            model,
            split,
            devices: devices.into_iter().collect(),
        })
}

proptest! {
    #[test]
    fn round_trips(handle in valid_handle()) {
        handle.validate().unwrap();
        let json = handle.to_json();
        prop_assert!(json.len() <= MAX_HANDLE_BYTES);
        prop_assert_eq!(AllocationHandle::parse(&json).unwrap(), handle);
    }

    #[test]
    fn never_panics_on_arbitrary_input(input in "\\PC{0,200}") {
        let _ = AllocationHandle::parse(&input);
    }
}
