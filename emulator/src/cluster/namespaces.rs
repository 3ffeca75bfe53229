//! What kube-controller-manager puts in every namespace: the `default` ServiceAccount (the
//! serviceaccount controller, `pkg/controller/serviceaccount`) and the `kube-root-ca.crt`
//! ConfigMap (the root-ca-cert-publisher, `pkg/controller/certificates/rootcacertpublisher`).
//!
//! The emulated apiserver serves plain HTTP and has no certificate authority, so the
//! ConfigMap's `ca.crt` is empty: it exists so that manifests and tools that expect it
//! (projected service-account volumes, `kubectl get cm`) find it.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use tokio::sync::broadcast;

use super::level_triggered;
use crate::apiserver::WatchEvent;

const DEFAULT_SERVICE_ACCOUNT: &str = "default";
const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

pub async fn run(client: kube::Client, changes: broadcast::Receiver<Arc<WatchEvent>>) {
    level_triggered("namespace-bootstrap", changes, || pass(&client)).await;
}

/// The namespaces (not being deleted) in which `name` of kind `K` exists.
async fn namespaces_holding<K>(
    client: &kube::Client,
    name: &str,
) -> Result<HashSet<String>, kube::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(Api::<K>::all(client.clone())
        .list(&by_name)
        .await?
        .items
        .into_iter()
        .filter_map(|o| o.meta().namespace.clone())
        .collect())
}

async fn pass(client: &kube::Client) -> Result<(), kube::Error> {
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let active: Vec<String> = namespaces
        .items
        .into_iter()
        .filter(|ns| ns.metadata.deletion_timestamp.is_none())
        .filter_map(|ns| ns.metadata.name)
        .collect();
    let with_account =
        namespaces_holding::<ServiceAccount>(client, DEFAULT_SERVICE_ACCOUNT).await?;
    let with_ca = namespaces_holding::<ConfigMap>(client, ROOT_CA_CONFIG_MAP).await?;
    for namespace in &active {
        let meta = |name: &str| ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        };
        if !with_account.contains(namespace) {
            let account = ServiceAccount {
                metadata: meta(DEFAULT_SERVICE_ACCOUNT),
                ..ServiceAccount::default()
            };
            ignore_conflicts(
                Api::<ServiceAccount>::namespaced(client.clone(), namespace)
                    .create(&PostParams::default(), &account)
                    .await,
            )?;
        }
        if !with_ca.contains(namespace) {
            let ca = ConfigMap {
                metadata: meta(ROOT_CA_CONFIG_MAP),
                data: Some([("ca.crt".to_string(), String::new())].into()),
                ..ConfigMap::default()
            };
            ignore_conflicts(
                Api::<ConfigMap>::namespaced(client.clone(), namespace)
                    .create(&PostParams::default(), &ca)
                    .await,
            )?;
        }
    }
    Ok(())
}

/// Already there (409), or the namespace went away or is terminating (404, 403): the next
/// pass sees the world as it is now.
fn ignore_conflicts<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404 | 409) => Ok(()),
        Err(error) => Err(error),
    }
}
