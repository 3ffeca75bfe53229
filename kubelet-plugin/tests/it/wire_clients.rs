//! Foreign clients on the wire: the kubelet's side of every service of the real plugin
//! binary, from gRPC stacks that are not ours — grpcio (Python; our .proto files compiled
//! at run time) and grpc-go (the upstream generated code of `k8s.io/kubelet`) — once per
//! `:authority` form that real kubelets send (the raw and the %-encoded socket path,
//! `localhost`) and a few odd ones. The clients live in `hack/wire-clients/` (README
//! there); they print one JSON line per call and this file asserts on every line. In
//! structured mode that includes the device health stream (`DRAResourceHealth`, v1alpha1
//! and v1): its first message, from both stacks.
//!
//! Each client also calls an authority probe (a grpc-go server that answers with the
//! `:authority` it received), so a form that a client silently replaces by another
//! would fail here instead of passing for the wrong reason.
//!
//! Needs python3 (with venv and a reachable package index) and go; the venv and the Go
//! binaries go to `target/wire-clients/`. Without python3 or go the tests fail, unless
//! `FAKE_DRA_SKIP_WIRE_CLIENTS=1` says to skip them (loudly).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::resource::v1;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

const NODE: &str = "node-1";
const UID_GOOD: &str = "0b7c1c6e-2f55-4a53-9a1e-0a6a4c3e7c11";
const UID_JSON: &str = "a4d0a3f2-9d41-4f4e-8d0e-6c4d7b1e2f22";
const UID_NODE: &str = "c31b9e55-7a0d-4c1e-9f3a-2b8d6e4f1a33";
const UID_PATH: &str = "../../etc/passwd";
const UID_MISSING: &str = "5c1e0f7a-3b2d-4e6f-8a9b-0c1d2e3f4a44";

/// The authority forms both clients send, named as the clients name them.
const FORMS: [&str; 7] = [
    "encoded-path",
    "raw-path",
    "localhost",
    "empty",
    "long-10KiB",
    "at-colon-bracket",
    "at-colon-bracket-malformed",
];
const CLIENTS: [&str; 2] = ["grpcio", "grpc-go"];

/// The forms `client` sends: [`FORMS`], and grpcio's default for a `unix:` target.
fn forms(client: &str) -> Vec<&'static str> {
    let mut forms = FORMS.to_vec();
    if client == "grpcio" {
        forms.push("grpcio-default");
    }
    forms
}

/// The `:authority` a form means to send for a socket at `path`.
fn authority(form: &str, path: &Path) -> String {
    let p = path.to_str().unwrap();
    match form {
        "encoded-path" => {
            // grpc-go's and Python's encoders agree on these characters: only `/` changes.
            assert!(
                p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._~/-".contains(&b)),
                "{p}"
            );
            p.replace('/', "%2F")
        }
        "raw-path" => p.to_owned(),
        "localhost" => "localhost".into(),
        "empty" => String::new(),
        "long-10KiB" => "a".repeat(10 * 1024),
        "at-colon-bracket" => "kubelet@[::1]:10250".into(),
        "at-colon-bracket-malformed" => "a@b@c:d[e".into(),
        // grpcio 1.85 with no authority option: the path without its leading `/`, encoded.
        "grpcio-default" => authority("encoded-path", path)
            .strip_prefix("%2F")
            .unwrap()
            .to_owned(),
        other => panic!("unknown form {other}"),
    }
}

/// How the probe reports an authority (`Summary` in hack/wire-clients/go/wire).
fn probe_summary(a: &str) -> String {
    if a.len() <= 512 {
        a.to_owned()
    } else {
        format!("{}:{}...{}", a.len(), &a[..32], &a[a.len() - 32..])
    }
}

/// A fully qualified CDI device id: `vendor/class=name` with the CDI name rules.
fn is_qualified(id: &str) -> bool {
    let Some((kind, name)) = id.split_once('=') else {
        return false;
    };
    let Some((vendor, class)) = kind.split_once('/') else {
        return false;
    };
    let alnum = |c: char| c.is_ascii_alphanumeric();
    vendor.starts_with(|c: char| c.is_ascii_alphabetic())
        && vendor.ends_with(alnum)
        && vendor.chars().all(|c| alnum(c) || "._-".contains(c))
        && !class.is_empty()
        && class.chars().all(|c| alnum(c) || "_-".contains(c))
        && name.starts_with(alnum)
        && name.chars().all(|c| alnum(c) || "_.:-".contains(c))
}

// ---- the clients: bootstrap and run ------------------------------------------------

struct Tools {
    python: PathBuf,
    go: PathBuf,
    go_classic: PathBuf,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Runs a bootstrap step; a failure is a test failure (the tool is there but broken).
fn run(cmd: &mut Command) {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The venv and the Go binaries, made once per test process. When python3 or go is not
/// installed: a failure, or `None` after a loud SKIPPED line (see [`cannot_run`]).
fn tools(test: &str) -> Option<&'static Tools> {
    static TOOLS: OnceLock<Result<Tools, Vec<&'static str>>> = OnceLock::new();
    match TOOLS.get_or_init(bootstrap) {
        Ok(tools) => Some(tools),
        Err(missing) => {
            cannot_run(
                &format!("wire_clients::{test}"),
                &format!("{missing:?} not on PATH, so the grpcio / grpc-go wire test cannot run"),
                "FAKE_DRA_SKIP_WIRE_CLIENTS",
            );
            None
        }
    }
}

fn bootstrap() -> Result<Tools, Vec<&'static str>> {
    let present = |tool: &str, arg: &str| {
        Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let missing: Vec<&str> = [("python3", "--version"), ("go", "version")]
        .into_iter()
        .filter(|(tool, arg)| !present(tool, arg))
        .map(|(tool, _)| tool)
        .collect();
    if !missing.is_empty() {
        return Err(missing);
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("wire-clients");
    std::fs::create_dir_all(&dir).unwrap();
    let clients = repo().join("hack/wire-clients");

    // The venv, remade whenever requirements.txt differs from what it was made with.
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    let requirements = clients.join("python/requirements.txt");
    let stamp = venv.join("requirements.installed");
    let wanted = std::fs::read(&requirements).unwrap();
    if std::fs::read(&stamp).ok().as_ref() != Some(&wanted) {
        run(Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(&venv));
        run(Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements));
        std::fs::write(&stamp, &wanted).unwrap();
    }

    // The Go binaries, built by the one script CI also runs in the background
    // (hack/wire-clients.sh; Go's build cache makes this quick when nothing changed).
    run(Command::new(clients.with_file_name("wire-clients.sh")).env("WIRE_CLIENTS_OUT", &dir));
    Ok(Tools {
        python,
        go: dir.join("wire-client-go"),
        go_classic: dir.join("wire-client-go-classic"),
    })
}

/// The authority probe: a grpc-go server on a unix socket that answers every call with
/// UNIMPLEMENTED and `probe-authority:<what it received>`.
struct Probe {
    child: Child,
    path: PathBuf,
}

impl Probe {
    fn start(tools: &Tools, dir: &Path) -> Self {
        let path = dir.join("probe.sock");
        let child = Command::new(&tools.go)
            .arg("probe")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut probe = Self { child, path };
        // Guards against a hang only.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !probe.path.exists() {
            assert!(
                probe.child.try_wait().unwrap().is_none(),
                "the probe exited"
            );
            assert!(Instant::now() < deadline, "the probe did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        probe
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes the clients' input file.
fn write_input(dir: &Path, input: &Value) -> PathBuf {
    let file = dir.join("wire-input.json");
    std::fs::write(&file, serde_json::to_vec_pretty(input).unwrap()).unwrap();
    file
}

/// Runs one client on the input file and returns its lines, in order.
fn run_client(mut cmd: Command, input: &Path) -> Vec<Value> {
    let out = cmd
        .arg("--input")
        .arg(input)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{cmd:?}: {e}: {line}")))
        .collect()
}

/// Runs every client on `input` and returns their lines.
fn run_clients(tools: &Tools, dir: &Path, input: &Value) -> Vec<Value> {
    let file = write_input(dir, input);
    let mut python = Command::new(&tools.python);
    python.arg(repo().join("hack/wire-clients/python/wire_client.py"));
    let mut lines = run_client(python, &file);
    lines.extend(run_client(Command::new(&tools.go), &file));
    lines.extend(run_client(Command::new(&tools.go_classic), &file));
    lines
}

// ---- expectations --------------------------------------------------------------------

type Check = Box<dyn Fn(&Value) -> Result<(), String>>;

/// What one call must answer under every form.
enum Want {
    /// The call succeeds and its response passes the check.
    Ok(Check),
    /// The call fails with this status code and a message containing the text.
    Status(&'static str, String),
}

struct Expect {
    socket: &'static str,
    call: String,
    case: String,
    want: Want,
}

fn expect(socket: &'static str, call: &str, case: &str, want: Want) -> Expect {
    Expect {
        socket,
        call: call.into(),
        case: case.into(),
        want,
    }
}

fn equals(want: Value) -> Want {
    Want::Ok(Box::new(move |got| {
        if *got == want {
            Ok(())
        } else {
            Err(format!("want {want}"))
        }
    }))
}

/// Per-claim answers: exactly these uids; each error contains its text ("" = no error).
fn per_claim(errors: Vec<(&str, String)>, check_good: Check) -> Want {
    let errors: Vec<(String, String)> = errors
        .into_iter()
        .map(|(uid, text)| (uid.to_owned(), text))
        .collect();
    Want::Ok(Box::new(move |got| {
        let claims = got["claims"].as_object().ok_or("no claims map")?;
        let mut uids: Vec<&String> = claims.keys().collect();
        let mut want: Vec<&String> = errors.iter().map(|(u, _)| u).collect();
        uids.sort();
        want.sort();
        if uids != want {
            return Err(format!("claims {uids:?}, want {want:?}"));
        }
        for (uid, text) in &errors {
            let entry = &claims[uid.as_str()];
            let err = entry["error"].as_str().ok_or("no error field")?;
            if text.is_empty() {
                if !err.is_empty() {
                    return Err(format!("{uid}: unexpected error {err:?}"));
                }
                check_good(entry).map_err(|e| format!("{uid}: {e}"))?;
            } else if !err.contains(text.as_str()) {
                return Err(format!("{uid}: error {err:?} lacks {text:?}"));
            }
        }
        Ok(())
    }))
}

fn no_check() -> Check {
    Box::new(|_| Ok(()))
}

fn health(services: &[&str]) -> Vec<Expect> {
    services
        .iter()
        .map(|svc| {
            expect(
                "dra",
                "grpc.health.v1.Health/Check",
                svc,
                equals(json!({"status": "SERVING"})),
            )
        })
        .collect()
}

fn registration(dirs: &Dirs, supported_versions: &[&str]) -> Vec<Expect> {
    vec![
        expect(
            "registration",
            "pluginregistration.Registration/GetInfo",
            "",
            equals(json!({
                "type": "DRAPlugin",
                "name": DRIVER,
                "endpoint": dirs.dra_socket().to_str().unwrap(),
                "supported_versions": supported_versions,
            })),
        ),
        expect(
            "registration",
            "pluginregistration.Registration/NotifyRegistrationStatus",
            "",
            equals(json!({})),
        ),
    ]
}

/// Checks every line of every client against `expects` under every form, and the probe's
/// authority. Prints, per client and form, how many calls answered as expected and how
/// the others went wrong (grouped), then fails with the groups that went wrong.
fn verify(lines: &[Value], probe: &Path, expects: &[Expect]) {
    let key = |l: &Value| ["client", "form", "socket", "call", "case"].map(|k| l[k].clone());
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for l in lines {
        *seen.entry(json!(key(l)).to_string()).or_default() += 1;
    }
    let find = |client: &str, form: &str, socket: &str, call: &str, case: &str| {
        let want = [client, form, socket, call, case].map(Value::from);
        match seen.get(&json!(want).to_string()) {
            Some(1) => Ok(lines.iter().find(|l| key(l) == want).unwrap()),
            Some(n) => Err(format!("{n} lines")),
            None => Err("no line".to_owned()),
        }
    };
    let mut report = String::new();
    let mut wrong_total = 0;
    let mut expected_keys = 0;
    for client in CLIENTS {
        for form in forms(client) {
            // why → the calls that went wrong that way.
            let mut wrong: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let mut fail = |call: &str, case: &str, why: String| {
                let case = &case[..case.len().min(40)];
                wrong
                    .entry(why)
                    .or_default()
                    .push(format!("{call}[{case}]"));
            };
            expected_keys += 1 + expects.len();
            let want = format!("probe-authority:{}", probe_summary(&authority(form, probe)));
            match find(client, form, "probe", "probe", "") {
                Ok(l) if l["code"] == "UNIMPLEMENTED" && l["message"] == want.as_str() => {}
                Ok(l) => fail("probe", "", format!("sent {}, want {want:?}", l["message"])),
                Err(e) => fail("probe", "", e),
            }
            for e in expects {
                let line = match find(client, form, e.socket, &e.call, &e.case) {
                    Ok(l) => l,
                    Err(why) => {
                        fail(&e.call, &e.case, why);
                        continue;
                    }
                };
                let ok = line["ok"] == true;
                let status = || format!("{} {}", line["code"], line["message"]);
                match &e.want {
                    Want::Ok(check) if ok => {
                        if let Err(why) = check(&line["response"]) {
                            fail(&e.call, &e.case, format!("{why}; got {}", line["response"]));
                        }
                    }
                    Want::Ok(_) => fail(&e.call, &e.case, format!("failed: {}", status())),
                    Want::Status(code, text)
                        if !ok
                            && line["code"] == *code
                            && line["message"]
                                .as_str()
                                .unwrap_or("")
                                .contains(text.as_str()) => {}
                    Want::Status(code, _) => fail(
                        &e.call,
                        &e.case,
                        format!("want {code}; got ok={ok} {}", status()),
                    ),
                }
            }
            let n_wrong: usize = wrong.values().map(Vec::len).sum();
            wrong_total += n_wrong;
            let total = 1 + expects.len();
            eprintln!(
                "{client:8} {form:28} {}/{total} as expected",
                total - n_wrong
            );
            for (why, calls) in &wrong {
                let line = format!(
                    "  {client} {form}: {} call(s) {}: {why}\n",
                    calls.len(),
                    calls.join(", ")
                );
                eprint!("{line}");
                report.push_str(&line);
            }
        }
    }
    if seen.len() != expected_keys {
        wrong_total += 1;
        report.push_str(&format!(
            "{} distinct lines, want {expected_keys}: unexpected lines (e.g. a dial error)?\n",
            seen.len()
        ));
    }
    assert!(
        wrong_total == 0,
        "{wrong_total} calls answered wrongly:\n{report}"
    );
}

/// A health stream's first message: exactly `devices` of `pool`, in any order, each
/// `HEALTHY` with no message.
fn all_healthy(pool: &str, devices: &[String]) -> Want {
    let mut want: Vec<Value> = devices
        .iter()
        .map(|d| json!({"pool": pool, "device": d, "health": "HEALTHY", "message": ""}))
        .collect();
    want.sort_by_key(Value::to_string);
    Want::Ok(Box::new(move |got| {
        let mut got = got["devices"].as_array().ok_or("no devices list")?.clone();
        got.sort_by_key(Value::to_string);
        if got == want {
            Ok(())
        } else {
            Err(format!("devices (any order), want {}", json!(want)))
        }
    }))
}

/// The devices the plugin published in its ResourceSlices for the pool `NODE` (v1 view),
/// once every slice of the pool's newest generation is there.
async fn published_devices(api: &fake_dra_emulator::apiserver::ApiServer) -> Vec<String> {
    let slices: Api<v1::ResourceSlice> = Api::all(api.client().unwrap());
    // Guards against a hang only.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = slices.list(&ListParams::default()).await.unwrap().items;
        let ours: Vec<&v1::ResourceSlice> = list
            .iter()
            .filter(|s| s.spec.driver == DRIVER && s.spec.pool.name == NODE)
            .collect();
        if let Some(generation) = ours.iter().map(|s| s.spec.pool.generation).max() {
            let current: Vec<&&v1::ResourceSlice> = ours
                .iter()
                .filter(|s| s.spec.pool.generation == generation)
                .collect();
            if i64::try_from(current.len()).unwrap() == current[0].spec.pool.resource_slice_count {
                return current
                    .iter()
                    .flat_map(|s| s.spec.devices.iter().flatten())
                    .map(|d| d.name.clone())
                    .collect();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no complete pool {NODE}: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn plugin_opts<'a>(api: &'a fake_dra_emulator::apiserver::ApiServer, mode: &str) -> Options<'a> {
    Options {
        node: NODE,
        kubeconfig: api.kubeconfig(),
        env: vec![],
        extra_args: vec!["--mode".into(), mode.into()],
    }
}

// ---- the tests -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_services_answer_foreign_clients_under_every_authority() {
    let Some(tools) = tools("classic_services_answer_foreign_clients_under_every_authority") else {
        return;
    };
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, plugin_opts(&api, "classic")).await;
    let probe = Probe::start(tools, dirs.root.path());

    // What our own client gets, for comparison.
    let good_handle = handle(NODE, &[0, 1, 2, 3], 2);
    let own = prepare(&dirs, vec![claim(UID_GOOD, &good_handle)]).await;
    let ids = own[UID_GOOD].cdi_devices.clone();
    assert_eq!(
        ids,
        vec![kind().qualified("common"), kind().qualified(UID_GOOD)]
    );
    assert!(ids.iter().all(|id| is_qualified(id)), "{ids:?}");
    assert_eq!(
        unprepare(&dirs, vec![claim(UID_GOOD, &good_handle)]).await[UID_GOOD].error,
        ""
    );

    let c = |uid: &str, handle: &str| {
        let m = claim(uid, handle);
        json!({"namespace": m.namespace, "uid": m.uid, "name": m.name, "resource_handle": m.resource_handle})
    };
    // (uid, handle, prepare error, unprepare error)
    let bad = [
        (
            UID_PATH,
            handle(NODE, &[5], 1),
            format!("claim uid {UID_PATH:?} is invalid"),
            format!("claim uid {UID_PATH:?} is invalid"),
        ),
        (
            UID_JSON,
            "{not json".into(),
            "not JSON".into(),
            String::new(),
        ),
        (
            UID_NODE,
            handle("node-2", &[0], 1),
            "is for node \"node-2\"".into(),
            String::new(),
        ),
    ];
    let input = json!({
        "registration_socket": dirs.reg_socket(),
        "dra_socket": dirs.dra_socket(),
        "probe_socket": probe.path,
        "proto_dir": repo().join("dra-kubelet-proto/proto"),
        "mode": "classic",
        "health_services": ["", "v1alpha3.Node", "v1alpha2.Node"],
        "classic": {
            "good": c(UID_GOOD, &good_handle),
            "bad": bad.iter().map(|(uid, h, _, _)| c(uid, h)).collect::<Vec<_>>(),
        },
    });
    let lines = run_clients(tools, dirs.root.path(), &input);

    let good_ids = {
        let ids = ids.clone();
        move |entry: &Value| {
            if entry["cdi_devices"] == json!(ids) {
                Ok(())
            } else {
                Err(format!("cdi_devices, want {ids:?}"))
            }
        }
    };
    let mut expects = registration(&dirs, &["1.0.0"]);
    expects.extend(health(&["", "v1alpha3.Node", "v1alpha2.Node"]));
    let mut prepare_errors = vec![(UID_GOOD, String::new())];
    let mut unprepare_errors = vec![(UID_GOOD, String::new())];
    for (uid, _, prep, unprep) in &bad {
        prepare_errors.push((uid, prep.clone()));
        unprepare_errors.push((uid, unprep.clone()));
    }
    expects.push(expect(
        "dra",
        "v1alpha3.Node/NodePrepareResources",
        "all",
        per_claim(prepare_errors, Box::new(good_ids)),
    ));
    expects.push(expect(
        "dra",
        "v1alpha3.Node/NodeUnprepareResources",
        "all",
        per_claim(unprepare_errors, no_check()),
    ));
    expects.push(expect(
        "dra",
        "v1alpha2.Node/NodePrepareResource",
        UID_GOOD,
        equals(json!({"cdi_devices": ids})),
    ));
    for (uid, _, prep, _) in &bad {
        expects.push(expect(
            "dra",
            "v1alpha2.Node/NodePrepareResource",
            uid,
            Want::Status("FAILED_PRECONDITION", prep.clone()),
        ));
    }
    expects.push(expect(
        "dra",
        "v1alpha2.Node/NodeUnprepareResource",
        UID_GOOD,
        equals(json!({})),
    ));
    verify(&lines, &probe.path, &expects);
    // Every prepare was undone: only the common spec is left.
    assert_eq!(dirs.spec_files(), vec![kind().spec_file_name("common")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_services_answer_foreign_clients_under_every_authority() {
    let Some(tools) = tools("structured_services_answer_foreign_clients_under_every_authority")
    else {
        return;
    };
    let api = start_api_version((1, 34)).await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, plugin_opts(&api, "structured")).await;
    let probe = Probe::start(tools, dirs.root.path());

    let good = allocated_claim(
        &api,
        "v1",
        "good",
        NODE,
        &[0, 1],
        Some(claim_config(json!({"count": 2, "split": 2}))),
    )
    .await;
    let unallocated = allocated_claim(&api, "v1", "unallocated", NODE, &[4], None).await;
    let claims = [
        (good.as_str(), "good"),
        (unallocated.as_str(), "unallocated"),
        (UID_MISSING, "missing"),
    ];

    // What our own client gets, for comparison.
    let answer = prepare_v1(&dirs, vec![v1_claim(&good, "good")])
        .await
        .remove(&good)
        .unwrap();
    assert_eq!(answer.error, "");
    assert_eq!(answer.devices.len(), 2);
    let devices: Vec<Value> = answer
        .devices
        .iter()
        .map(|d| {
            assert!(d.cdi_device_ids.iter().all(|id| is_qualified(id)), "{d:?}");
            json!({
                "request_names": d.request_names,
                "pool_name": d.pool_name,
                "device_name": d.device_name,
                "cdi_device_ids": d.cdi_device_ids,
            })
        })
        .collect();
    unprepare_v1(&dirs, vec![v1_claim(&good, "good")]).await;

    // The devices the health stream must report: the published ones, which are the fake
    // profile's `fake-0`…`fake-<n-1>`.
    let mut published = published_devices(&api).await;
    published.sort();
    let mut fake: Vec<String> = (0..inventory(NODE).devices.len())
        .map(|i| format!("fake-{i}"))
        .collect();
    fake.sort();
    assert_eq!(published, fake);

    let input = json!({
        "registration_socket": dirs.reg_socket(),
        "dra_socket": dirs.dra_socket(),
        "probe_socket": probe.path,
        "proto_dir": repo().join("dra-kubelet-proto/proto"),
        "mode": "structured",
        "health_services": [
            "",
            "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
            "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
        ],
        "structured": {"claims": claims.iter().map(|(uid, name)| json!({
            "namespace": CLAIM_NS, "uid": uid, "name": name,
        })).collect::<Vec<_>>()},
    });
    let lines = run_clients(tools, dirs.root.path(), &input);

    let mut expects = registration(
        &dirs,
        &[
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth",
        ],
    );
    expects.extend(health(&[
        "",
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
    ]));
    for version in ["v1beta1", "v1"] {
        let service = format!("k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin");
        let devices = devices.clone();
        expects.push(expect(
            "dra",
            &format!("{service}/NodePrepareResources"),
            "all",
            per_claim(
                vec![
                    (good.as_str(), String::new()),
                    (unallocated.as_str(), "not allocated".into()),
                    (
                        UID_MISSING,
                        format!("ResourceClaim {CLAIM_NS}/missing not found"),
                    ),
                ],
                Box::new(move |entry| {
                    if entry["devices"] == json!(devices) {
                        Ok(())
                    } else {
                        Err(format!("devices, want {}", json!(devices)))
                    }
                }),
            ),
        ));
        expects.push(expect(
            "dra",
            &format!("{service}/NodeUnprepareResources"),
            "all",
            per_claim(
                claims
                    .iter()
                    .map(|(uid, _)| (*uid, String::new()))
                    .collect(),
                no_check(),
            ),
        ));
    }
    // Without DeviceFaults every device of the pool is healthy, in the stream's first
    // message (the clients cancel the stream after it).
    for version in ["v1alpha1", "v1"] {
        expects.push(expect(
            "dra",
            &format!("{version}.DRAResourceHealth/NodeWatchResources"),
            "",
            all_healthy(NODE, &published),
        ));
    }
    verify(&lines, &probe.path, &expects);
    assert_eq!(dirs.spec_files(), vec![kind().spec_file_name("common")]);
}

/// Kubelet 1.28 reads `result.Error` and `result.CDIDevices` of the v1alpha3 answers
/// directly, not through the getters, on gogo-decoded messages; there a map entry whose
/// value is absent on the wire (a valid encoding of an empty message) is a nil pointer,
/// and the kubelet panics. So every entry must carry its value, even an empty one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_answers_carry_every_map_value_for_kubelet_1_28() {
    let Some(tools) = tools("classic_answers_carry_every_map_value_for_kubelet_1_28") else {
        return;
    };
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, plugin_opts(&api, "classic")).await;
    let c = |uid: &str, handle: &str| json!({"namespace": "default", "uid": uid, "name": "c", "resource_handle": handle});
    let input = json!({
        "registration_socket": dirs.reg_socket(),
        "dra_socket": dirs.dra_socket(),
        "mode": "classic",
        "classic": {
            "good": c(UID_GOOD, &handle(NODE, &[0], 1)),
            "bad": [c(UID_JSON, "{not json")],
        },
    });
    let lines = run_client(
        Command::new(&tools.go_classic),
        &write_input(dirs.root.path(), &input),
    );
    let mut checked = Vec::new();
    for l in &lines {
        let call = l["call"].as_str().unwrap();
        if !call.starts_with("v1alpha3.Node/") || l["ok"] != true {
            continue;
        }
        for (uid, entry) in l["response"]["claims"].as_object().unwrap() {
            checked.push(format!("{} {call} {uid}", l["form"]));
            assert!(
                entry.get("value_missing").is_none(),
                "{} {call}: the answer for {uid} has no value on the wire; kubelet 1.28 \
                 dereferences it (nil with gogo) and panics: {l}",
                l["form"]
            );
        }
    }
    // Not vacuous: at least one form's prepare and unprepare got through (both claims).
    assert!(checked.len() >= 4, "{checked:?} {lines:?}");
}

/// Device metadata files (`--device-metadata`, KEP-5304) as a workload reads them: through
/// upstream's own reader, `k8s.io/dynamic-resource-allocation/devicemetadata` v0.37.2
/// (`wire-client-go metadata`), with its declarative validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_reader_decodes_device_metadata_files() {
    let Some(tools) = tools("upstream_reader_decodes_device_metadata_files") else {
        return;
    };
    let api = start_api_version((1, 34)).await;
    let dirs = Dirs::new();
    let mut opts = plugin_opts(&api, "structured");
    opts.extra_args.push("--device-metadata".into());
    let _plugin = Plugin::start(&dirs, opts).await;
    let uid = allocated_claim(
        &api,
        "v1",
        "meta",
        NODE,
        &[2, 3],
        Some(claim_config(json!({"count": 2, "split": 2}))),
    )
    .await;
    let answer = prepare_v1(&dirs, vec![v1_claim(&uid, "meta")])
        .await
        .remove(&uid)
        .unwrap();
    assert_eq!(answer.error, "");
    let metadata_id = format!("{DRIVER}/metadata={uid}_req");
    assert!(
        answer.devices[0].cdi_device_ids.contains(&metadata_id),
        "{answer:?}"
    );

    let file = dirs.plugin_dir().join(format!(
        "dra-device-metadata/{CLAIM_NS}_meta/req/metadata.json"
    ));
    let out = Command::new(&tools.go)
        .arg("metadata")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["ok"], true, "{line}");
    assert_eq!(
        line["decoded"], "metadata.resource.k8s.io/v1beta1",
        "{line}"
    );
    assert!(line.get("invalid").is_none(), "upstream validation: {line}");
    let metadata = &line["metadata"];
    assert_eq!(metadata["metadata"]["uid"], uid.as_str(), "{line}");
    assert_eq!(metadata["metadata"]["namespace"], CLAIM_NS, "{line}");
    assert_eq!(metadata["requests"][0]["name"], "req", "{line}");
    let devices = metadata["requests"][0]["devices"].as_array().unwrap();
    let names: Vec<&str> = devices.iter().filter_map(|d| d["name"].as_str()).collect();
    assert_eq!(names, ["fake-2", "fake-3"], "{line}");
    assert!(
        devices.iter().all(|d| d["pool"] == NODE
            && d["driver"] == DRIVER
            && d["attributes"].as_object().is_some_and(|a| !a.is_empty())),
        "every device with its published attributes: {line}"
    );

    // A stream upstream's reader cannot use is refused by it, not silently accepted: the
    // check above could fail.
    let garbage = dirs.root.path().join("garbage.json");
    std::fs::write(
        &garbage,
        br#"{"kind":"DeviceMetadata","apiVersion":"metadata.resource.k8s.io/v9"}"#,
    )
    .unwrap();
    let out = Command::new(&tools.go)
        .arg("metadata")
        .arg(&garbage)
        .output()
        .unwrap();
    let line: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["ok"], false, "{line}");

    unprepare_v1(&dirs, vec![v1_claim(&uid, "meta")]).await;
    assert!(!file.exists());
}
