//! `DeviceFault`s as the library's fault hook: the node plugin's calls fail, wait or hang,
//! its devices get taints, binding conditions and health, as the faults selecting the node
//! say; the faults' status and the claims' `status.devices` are written as they ask.

use std::collections::BTreeMap;
use std::sync::Arc;

use dra_kubelet_plugin::claim::ClaimRef;
use dra_kubelet_plugin::device::SliceDevice;
use dra_kubelet_plugin::device::TaintRules;
use dra_kubelet_plugin::hook::{FaultHook, HealthStatus, HookContext, Refusal};
use fake_dra_api::fault;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::watch;

use super::Fault;
use super::watch::NodeView;

/// The faults of one node, fed by a watch the plugin starts.
#[derive(Debug, Clone)]
pub struct DeviceFaults {
    driver: String,
    feed: watch::Sender<Arc<Vec<Fault>>>,
    view: NodeView,
}

impl DeviceFaults {
    /// The faults of `node`, whose pool has `devices`, for `driver`; none until the plugin
    /// starts the hook.
    pub fn new(driver: &str, node: &str, devices: Vec<String>) -> Self {
        let (feed, faults) = watch::channel(Arc::new(Vec::new()));
        Self {
            driver: driver.to_owned(),
            feed,
            view: NodeView::new(faults, node, devices),
        }
    }
}

impl FaultHook for DeviceFaults {
    /// The watch, this node's entries in the faults' status, the DeviceTaintRules of
    /// `via: Rule` taints, and the claims' status.
    fn start(&self, context: &HookContext) -> Vec<tokio::task::JoinHandle<()>> {
        let watch = super::watch::feed(context.client.clone(), self.feed.clone());
        let (rule_objects, rule_objects_seen) = watch::channel(Default::default());
        let reporter = tokio::spawn(super::report(
            context.client.clone(),
            self.view.clone(),
            context.taint_rules,
            rule_objects_seen,
        ));
        let node_faults = {
            let (view, node) = (self.view.clone(), context.node_name.clone());
            Arc::new(move || BTreeMap::from([(node.clone(), view.current())]))
        };
        let rules = tokio::spawn(super::rules::run(
            context.client.clone(),
            self.driver.clone(),
            super::rules::writer_for_node(&context.node_name),
            context.field_manager.clone(),
            self.view.faults(),
            node_faults,
            rule_objects,
        ));
        let view = self.view.clone();
        let node = context.node_name.clone();
        let claim_status = tokio::spawn(super::claim_status::run(
            context.client.clone(),
            context.resource_api,
            self.driver.clone(),
            context.field_manager.clone(),
            self.view.faults(),
            Arc::new(move || BTreeMap::from([(node.clone(), view.current())])),
        ));
        vec![watch, reporter, rules, claim_status]
    }

    fn get_info(&self) -> Result<(), String> {
        match self.view.current().get_info() {
            Some(message) => Err(message),
            None => Ok(()),
        }
    }

    fn before_prepare<'a>(
        &'a self,
        claim: &'a ClaimRef,
        devices: &'a [String],
    ) -> BoxFuture<'a, Result<(), Refusal>> {
        Box::pin(async move {
            self.view
                .gate("prepare", |f| {
                    f.prepare(&claim.namespace, &claim.name, devices)
                })
                .await
                .map_err(|(by, message)| Refusal::new(by, message))
        })
    }

    fn before_unprepare<'a>(
        &'a self,
        claim: &'a ClaimRef,
        devices: &'a [String],
    ) -> BoxFuture<'a, Result<(), Refusal>> {
        Box::pin(async move {
            self.view
                .gate("unprepare", |f| {
                    f.unprepare(&claim.namespace, &claim.name, devices)
                })
                .await
                .map_err(|(by, message)| Refusal::new(by, message))
        })
    }

    fn overlay(&self, devices: Vec<SliceDevice>, taint_rules: TaintRules) -> Vec<SliceDevice> {
        self.view
            .current()
            .overlay(&devices, &self.driver, taint_rules)
    }

    fn health(&self, device: &str) -> (HealthStatus, Option<String>) {
        let (status, message) = self.view.current().health(device);
        let status = match status {
            fault::HealthStatus::Healthy => HealthStatus::Healthy,
            fault::HealthStatus::Unhealthy => HealthStatus::Unhealthy,
            fault::HealthStatus::Unknown => HealthStatus::Unknown,
        };
        (status, message)
    }

    fn changes(&self) -> BoxStream<'static, ()> {
        Box::pin(futures::stream::unfold(
            self.view.faults(),
            |mut faults| async move {
                faults.changed().await.ok()?;
                Some(((), faults))
            },
        ))
    }
}
