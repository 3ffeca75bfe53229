//! The node's Lease in `kube-node-lease`, as the kubelet's node lease controller keeps it
//! (`k8s.io/component-helpers/apimachinery/lease`, `pkg/kubelet/nodelease`): named after
//! the node, held by it for 40 s (`nodeLeaseDurationSeconds`), owned by the Node, renewed
//! every quarter of that. `kubectl describe node` reads it (without it, it printed
//! "Failed to get lease").

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, Patch, PatchParams};

use super::NodeContext;

const NAMESPACE: &str = "kube-node-lease";
const DURATION_SECONDS: i32 = 40;
/// `renewIntervalFraction` 0.25 of the duration.
const RENEW_INTERVAL: Duration = Duration::from_secs(10);

/// Renews the lease for as long as the kubelet runs; a failed renewal is tried again at
/// the next interval, as upstream's controller does.
pub(super) async fn keep_node_lease(ctx: Arc<NodeContext>) {
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), NAMESPACE);
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    loop {
        if let Err(e) = renew(&leases, &nodes, &ctx.node).await {
            tracing::debug!(node = %ctx.node, "node lease not renewed: {e}");
        }
        tokio::time::sleep(RENEW_INTERVAL).await;
    }
}

async fn renew(leases: &Api<Lease>, nodes: &Api<Node>, node: &str) -> Result<(), kube::Error> {
    let uid = nodes.get(node).await?.metadata.uid.unwrap_or_default();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(node.to_string()),
            namespace: Some(NAMESPACE.to_string()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.to_string(),
                uid,
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.to_string()),
            lease_duration_seconds: Some(DURATION_SECONDS),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..LeaseSpec::default()
        }),
    };
    leases
        .patch(
            node,
            &PatchParams::apply("kubelet").force(),
            &Patch::Apply(&lease),
        )
        .await?;
    Ok(())
}
