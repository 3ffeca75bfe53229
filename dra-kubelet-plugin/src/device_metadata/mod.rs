//! Device metadata files (KEP-5304, beta in Kubernetes 1.37, the driver opts in): for each
//! request of a prepared claim, a JSON file naming its devices and their attributes, which
//! CDI bind-mounts read-only into the containers that use the request. A workload learns
//! which devices it got (a PCI address, a model) without reading the API.
//!
//! Layout and format are the upstream Go helper's (`k8s.io/dynamic-resource-allocation`
//! v0.37.2, `kubeletplugin/metadata.go` and `api/metadata`), so that its reader
//! (`devicemetadata.ReadResourceClaimMetadata`) finds and decodes the files:
//!
//! - on the host, `<plugin dir>/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json`;
//! - in the container, `/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json`,
//!   or `resourceclaimtemplates/<pod claim name>/…` for a claim made from a template;
//! - the CDI device `<driver>/metadata=<claim uid>_<request>`, in the spec file
//!   `<cdi root>/<driver>_metadata_<claim uid>_<request>.json`.
//!
//! A file is a JSON stream: the same object once per chosen [`MetadataVersion`], the
//! newest first, so a reader takes the first version it knows.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::cdi_spec::{ContainerEdits, Device, Mount, Spec, min_version};
use crate::claim_data::{AllocatedDevice, ClaimRef, ClaimUid};
use crate::claim_error::ClaimError;
use crate::claim_reader::is_dns_label;
use crate::fsutil::{self, Durability, SPEC_MODE};
use crate::model::Attribute;

/// The directory under the plugin dir that holds the metadata files.
pub const METADATA_DIR: &str = "dra-device-metadata";
/// Where containers find the files (`metadata.ContainerDir`).
pub const CONTAINER_DIR: &str = "/var/run/kubernetes.io/dra-device-attributes";
/// The API group of the files' objects.
const GROUP: &str = "metadata.resource.k8s.io";

/// A version of the `metadata.resource.k8s.io` files. Kubernetes 1.36's reader knows
/// `v1alpha1`, 1.37's both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum MetadataVersion {
    /// `metadata.resource.k8s.io/v1beta1` (Kubernetes 1.37).
    V1beta1,
    /// `metadata.resource.k8s.io/v1alpha1` (Kubernetes 1.36).
    V1alpha1,
}

impl MetadataVersion {
    /// Every version, newest first: what a driver that wants every reader to understand
    /// its files writes.
    pub const ALL: [MetadataVersion; 2] = [Self::V1beta1, Self::V1alpha1];

    /// `metadata.resource.k8s.io/<version>`.
    pub fn api_version(self) -> String {
        let version = match self {
            Self::V1beta1 => "v1beta1",
            Self::V1alpha1 => "v1alpha1",
        };
        format!("{GROUP}/{version}")
    }
}

/// One object of a metadata file (`DeviceMetadata`; both versions have the same fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceMetadata {
    kind: String,
    api_version: String,
    metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod_claim_name: Option<String>,
    #[serde(default)]
    requests: Vec<MetadataRequest>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ObjectMeta {
    name: String,
    namespace: String,
    uid: String,
    generation: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct MetadataRequest {
    /// The request as the allocation names it (`request/subrequest` for `firstAvailable`).
    name: String,
    #[serde(default)]
    devices: Vec<MetadataDevice>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct MetadataDevice {
    driver: String,
    pool: String,
    name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    attributes: BTreeMap<String, serde_json::Value>,
}

/// An attribute as a ResourceSlice writes it: exactly one of `int`, `bool`, `string`,
/// `version`.
fn attribute_json(value: &Attribute) -> serde_json::Value {
    match value {
        Attribute::Int(v) => serde_json::json!({ "int": v }),
        Attribute::Bool(v) => serde_json::json!({ "bool": v }),
        Attribute::String(v) => serde_json::json!({ "string": v }),
        Attribute::Version(v) => serde_json::json!({ "version": v }),
    }
}

/// What the files of one claim say: the claim, and per allocated device its pool and
/// attributes (as published).
#[derive(Debug, Clone)]
pub(crate) struct ClaimMetadata<'a> {
    pub claim: &'a ClaimRef,
    /// The claim's [`POD_CLAIM_NAME_ANNOTATION`].
    pub pod_claim_name: Option<&'a str>,
    /// The pool of a device whose own is not known (this node's).
    pub pool: &'a str,
    /// The devices of this driver allocated to the claim, with their attributes.
    pub devices: Vec<(&'a AllocatedDevice, BTreeMap<String, Attribute>)>,
}

/// The writer of a structured plugin whose driver opted in, once the files were checked
/// against the claims prepared now ([`MetadataWriter::reconcile`]), before anything is
/// served. A failed check is logged: the files are then as the last run left them.
pub(crate) async fn start(
    writer: Option<MetadataWriter>,
    prepared: BTreeSet<ClaimUid>,
    remove_stale: bool,
) -> Option<Arc<MetadataWriter>> {
    let writer = Arc::new(writer?);
    let checking = writer.clone();
    let checked =
        tokio::task::spawn_blocking(move || checking.reconcile(&prepared, remove_stale)).await;
    match checked {
        Ok(Ok((kept, removed))) => {
            info!(
                kept,
                removed, "device metadata files checked against the checkpoint"
            );
        }
        Ok(Err(e)) => warn!(error = %e, "device metadata files could not be checked"),
        Err(e) => warn!(error = %e, "device metadata files could not be checked"),
    }
    Some(writer)
}

/// Writes and removes the metadata files of this driver's claims on this node.
#[derive(Debug, Clone)]
pub(crate) struct MetadataWriter {
    driver: String,
    plugin_dir: PathBuf,
    cdi_root: PathBuf,
    versions: Vec<MetadataVersion>,
}

impl MetadataWriter {
    /// A writer of `versions` (in that order, duplicates dropped); `None` when there are
    /// none: the driver did not opt in.
    pub fn new(
        driver: &str,
        plugin_dir: &Path,
        cdi_root: &Path,
        versions: &[MetadataVersion],
    ) -> Option<Self> {
        let mut seen = BTreeSet::new();
        let versions: Vec<_> = versions
            .iter()
            .copied()
            .filter(|v| seen.insert(*v))
            .collect();
        (!versions.is_empty()).then(|| Self {
            driver: driver.to_owned(),
            plugin_dir: plugin_dir.to_owned(),
            cdi_root: cdi_root.to_owned(),
            versions,
        })
    }

    /// `<plugin dir>/dra-device-metadata/<namespace>_<claim>`.
    fn claim_dir(&self, claim: &ClaimRef) -> PathBuf {
        self.plugin_dir
            .join(METADATA_DIR)
            .join(format!("{}_{}", claim.namespace, claim.name))
    }

    /// `<cdi root>/<driver>_metadata_<uid>_<request>.json`: the spec of one request's file.
    fn spec_path(&self, uid: &ClaimUid, base_request: &str) -> PathBuf {
        self.cdi_root.join(format!(
            "{}_metadata_{}_{base_request}.json",
            self.driver,
            uid.as_str()
        ))
    }

    /// Writes the spec that mounts `host`, the file of request `base_request`; returns the
    /// CDI device name.
    fn write_spec(
        &self,
        claim: &ClaimRef,
        pod_claim_name: Option<&str>,
        base_request: &str,
        host: &Path,
    ) -> io::Result<String> {
        let name = format!("{}_{base_request}", claim.uid.as_str());
        let container = self.container_path(&claim.name, pod_claim_name, base_request);
        let spec = self.spec(&name, host, &container);
        let path = self.spec_path(&claim.uid, base_request);
        fsutil::write_atomic(&path, &spec.to_bytes(), SPEC_MODE, Durability::Visible)?;
        Ok(name)
    }

    /// Writes the file and the CDI spec of every request of the claim, and returns the CDI
    /// id per request (without `/subrequest`) for the kubelet's answer. Writing again
    /// (a retry, a restart) rewrites the same content.
    pub fn write(&self, m: &ClaimMetadata<'_>) -> Result<BTreeMap<String, String>, ClaimError> {
        check_path_names(m.claim)?;
        let mut by_request: BTreeMap<&str, Vec<MetadataDevice>> = BTreeMap::new();
        for (device, attributes) in &m.devices {
            let full = device.request.as_str();
            for part in full.split('/') {
                if !is_dns_label(part) {
                    return Err(bad_name(m.claim, "request", full));
                }
            }
            by_request.entry(full).or_default().push(MetadataDevice {
                driver: self.driver.clone(),
                pool: if device.pool.is_empty() {
                    m.pool.to_owned()
                } else {
                    device.pool.clone()
                },
                name: device.device.clone(),
                attributes: attributes
                    .iter()
                    .map(|(k, v)| (k.clone(), attribute_json(v)))
                    .collect(),
            });
        }
        let mut ids = BTreeMap::new();
        let dir = self.claim_dir(m.claim);
        for (full, devices) in by_request {
            let base = full.split('/').next().unwrap_or(full);
            let host = dir.join(base).join("metadata.json");
            let bytes = self.document(m.claim, m.pod_claim_name, full, devices);
            let io = |action, path: &Path| {
                let path = path.display().to_string();
                move |e: io::Error| ClaimError::Io {
                    claim: m.claim.to_string(),
                    action,
                    path,
                    error: e.to_string(),
                }
            };
            let request_dir = dir.join(base);
            fsutil::create_dir(&request_dir).map_err(io("create", &request_dir))?;
            fsutil::create_dir(&self.cdi_root).map_err(io("create", &self.cdi_root))?;
            fsutil::write_atomic(&host, &bytes, SPEC_MODE, Durability::Visible)
                .map_err(io("write", &host))?;
            let name = self
                .write_spec(m.claim, m.pod_claim_name, base, &host)
                .map_err(io("write", &self.spec_path(&m.claim.uid, base)))?;
            ids.insert(base.to_owned(), format!("{}/metadata={name}", self.driver));
        }
        Ok(ids)
    }

    /// Removes the claim's files and their specs (one per request directory found, so the
    /// cost does not grow with the CDI dir); nothing there is not an error, and a claim
    /// whose names could never have been written (unsafe as a path) has nothing to remove.
    /// A spec whose file went missing some other way is left to [`Self::reconcile`].
    pub fn remove(&self, claim: &ClaimRef) -> Result<(), ClaimError> {
        let io = |action, path: &Path| {
            let path = path.display().to_string();
            move |e: io::Error| ClaimError::Io {
                claim: claim.to_string(),
                action,
                path,
                error: e.to_string(),
            }
        };
        if check_path_names(claim).is_err() {
            return Ok(());
        }
        let dir = self.claim_dir(claim);
        let requests = match std::fs::read_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other.map_err(io("list", &dir))?,
        };
        for request in requests.flatten() {
            let base = request.file_name().to_string_lossy().into_owned();
            let spec = self.spec_path(&claim.uid, &base);
            fsutil::remove_if_exists(&spec).map_err(io("remove", &spec))?;
        }
        std::fs::remove_dir_all(&dir).map_err(io("remove", &dir))
    }

    /// At start: the CDI specs of the files of claims still prepared are written again
    /// (`/var/run/cdi` is a tmpfs a reboot empties, while the kubelet, whose checkpoint
    /// says the claim is prepared, will not ask again), and with `remove_stale` the files
    /// of claims no longer prepared are removed. Files are written after a claim's
    /// checkpoint and removed before it, so only a lost checkpoint leaves stale ones; an
    /// instance that shares the plugin dir with another (a rolling update) must not remove
    /// what the other may have just written. Returns how many claims' files were kept and
    /// removed.
    pub fn reconcile(
        &self,
        prepared: &BTreeSet<ClaimUid>,
        remove_stale: bool,
    ) -> io::Result<(usize, usize)> {
        let root = self.plugin_dir.join(METADATA_DIR);
        let claims = match std::fs::read_dir(&root) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, 0)),
            other => other?,
        };
        let (mut kept, mut removed) = (0, 0);
        for claim_dir in claims.flatten() {
            let path = claim_dir.path();
            match self.restore_specs(&path, prepared) {
                Ok(true) => kept += 1,
                // Not a claim of ours still prepared (or unreadable): its files go.
                Ok(false) | Err(_) if remove_stale => {
                    std::fs::remove_dir_all(&path)?;
                    removed += 1;
                }
                Ok(false) | Err(_) => {}
            }
        }
        if remove_stale {
            self.remove_orphan_specs(prepared)?;
        }
        Ok((kept, removed))
    }

    /// Removes the specs of ours (`<driver>_metadata_<uid>_*.json`) whose claim is not
    /// prepared: what a metadata directory removed behind the plugin's back left.
    fn remove_orphan_specs(&self, prepared: &BTreeSet<ClaimUid>) -> io::Result<()> {
        let prefix = format!("{}_metadata_", self.driver);
        let entries = match std::fs::read_dir(&self.cdi_root) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            let Some(rest) = file.strip_prefix(&prefix) else {
                continue;
            };
            let uid = rest.split('_').next().unwrap_or_default();
            let held = ClaimUid::parse(uid).is_ok_and(|uid| prepared.contains(&uid));
            if !held && file.ends_with(".json") {
                fsutil::remove_if_exists(&entry.path())?;
            }
        }
        Ok(())
    }

    /// Writes the specs of one claim's files if the claim is still prepared.
    fn restore_specs(&self, claim_dir: &Path, prepared: &BTreeSet<ClaimUid>) -> io::Result<bool> {
        let mut restored = false;
        for request in std::fs::read_dir(claim_dir)?.flatten() {
            let host = request.path().join("metadata.json");
            let Some(bytes) = fsutil::read_regular(&host)? else {
                continue;
            };
            let first = serde_json::Deserializer::from_slice(&bytes)
                .into_iter::<DeviceMetadata>()
                .next()
                .transpose()
                .map_err(io::Error::other)?;
            let Some(doc) = first else { continue };
            let Ok(uid) = ClaimUid::parse(&doc.metadata.uid) else {
                return Ok(false);
            };
            if !prepared.contains(&uid) {
                return Ok(false);
            }
            let base = request.file_name().to_string_lossy().into_owned();
            let claim = ClaimRef {
                uid: uid.clone(),
                namespace: doc.metadata.namespace.clone(),
                name: doc.metadata.name.clone(),
            };
            fsutil::create_dir(&self.cdi_root)?;
            self.write_spec(&claim, doc.pod_claim_name.as_deref(), &base, &host)?;
            restored = true;
        }
        Ok(restored)
    }

    /// The file of one request: the object once per version.
    fn document(
        &self,
        claim: &ClaimRef,
        pod_claim_name: Option<&str>,
        request: &str,
        devices: Vec<MetadataDevice>,
    ) -> Vec<u8> {
        let mut doc = DeviceMetadata {
            kind: "DeviceMetadata".to_owned(),
            api_version: String::new(),
            metadata: ObjectMeta {
                name: claim.name.clone(),
                namespace: claim.namespace.clone(),
                uid: claim.uid.as_str().to_owned(),
                generation: 1,
            },
            pod_claim_name: pod_claim_name.map(str::to_owned),
            requests: vec![MetadataRequest {
                name: request.to_owned(),
                devices,
            }],
        };
        let mut bytes = Vec::new();
        for version in &self.versions {
            doc.api_version = version.api_version();
            // Plain data with string keys: serializing cannot fail.
            if serde_json::to_writer_pretty(&mut bytes, &doc).is_ok() {
                bytes.push(b'\n');
            }
        }
        bytes
    }

    /// Where the container sees a request's file.
    fn container_path(
        &self,
        claim_name: &str,
        pod_claim_name: Option<&str>,
        base_request: &str,
    ) -> String {
        let file = format!("{}-metadata.json", self.driver);
        match pod_claim_name.filter(|n| !n.is_empty()) {
            Some(pod_claim) => {
                format!("{CONTAINER_DIR}/resourceclaimtemplates/{pod_claim}/{base_request}/{file}")
            }
            None => format!("{CONTAINER_DIR}/resourceclaims/{claim_name}/{base_request}/{file}"),
        }
    }

    /// The spec that mounts one request's file read-only.
    fn spec(&self, device_name: &str, host: &Path, container: &str) -> Spec {
        let devices = vec![Device {
            name: device_name.to_owned(),
            container_edits: ContainerEdits {
                mounts: vec![Mount::bind(host.display().to_string(), container).read_only()],
                ..ContainerEdits::default()
            },
        }];
        Spec {
            cdi_version: min_version(&devices).to_owned(),
            kind: format!("{}/metadata", self.driver),
            devices,
        }
    }
}

/// The namespace and name become a directory name: they must be what the API allows
/// (a label and a subdomain), which no `..` or `/` is.
fn check_path_names(claim: &ClaimRef) -> Result<(), ClaimError> {
    if !is_dns_label(&claim.namespace) {
        return Err(bad_name(claim, "namespace", &claim.namespace));
    }
    if claim.name.len() > 253 || !claim.name.split('.').all(is_dns_label) {
        return Err(bad_name(claim, "name", &claim.name));
    }
    Ok(())
}

fn bad_name(claim: &ClaimRef, field: &'static str, value: &str) -> ClaimError {
    ClaimError::NotAPathName {
        claim: claim.to_string(),
        field,
        value: crate::claim_data::shorten(value).to_string(),
    }
}

#[cfg(test)]
mod tests;
