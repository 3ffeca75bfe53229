//! The controller's API writes: the finalizer, the allocation (status), deallocation, and
//! Immediate allocation, each under the ledger's rules (see the parent module).

use super::*;

impl Context {
    /// Adds our finalizer (before anything is allocated), returning the updated claim.
    pub(super) async fn add_finalizer(&self, claim: &ResourceClaim) -> Result<ResourceClaim> {
        let finalizer = self.config.finalizer();
        if claim.has_finalizer(&finalizer) {
            return Ok(claim.clone());
        }
        let rv = claim.resource_version().unwrap_or_default();
        let add = if claim.metadata.finalizers.is_some() {
            json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
        } else {
            json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]})
        };
        let patch: json_patch_value::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            add
        ]))
        .map_err(Error::Serialize)?;
        let ns = claim.namespace().unwrap_or_default();
        self.claims_api(&ns)
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
            .map_err(Error::Kube)
    }

    pub(super) async fn remove_finalizer(&self, claim: &ResourceClaim) -> Result<()> {
        let finalizer = self.config.finalizer();
        let Some(list) = claim.metadata.finalizers.as_ref() else {
            return Ok(());
        };
        let rest: Vec<&String> = list.iter().filter(|f| **f != finalizer).collect();
        if rest.len() == list.len() {
            return Ok(());
        }
        let rv = claim.resource_version().unwrap_or_default();
        let patch: json_patch_value::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "replace", "path": "/metadata/finalizers", "value": rest}
        ]))
        .map_err(Error::Serialize)?;
        let ns = claim.namespace().unwrap_or_default();
        self.claims_api(&ns)
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
            .map_err(Error::Kube)?;
        Ok(())
    }

    /// Writes the allocation into the claim's status. On success the write is kept in the
    /// ledger; on failure nothing is, so the devices are free again.
    pub(super) async fn write_allocation(
        &self,
        ledger: &mut Ledger,
        claim: &ResourceClaim,
        handle: &AllocationHandle,
    ) -> Result<()> {
        handle
            .validate()
            .map_err(|e| Error::Internal(format!("built an invalid handle: {e}")))?;
        let driver = self.config.driver_name.clone();
        let mut updated = claim.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        status.driver_name = Some(driver.clone());
        status.allocation = Some(AllocationResult {
            resource_handles: Some(vec![ResourceHandle {
                driver_name: Some(driver),
                data: Some(handle.to_json()),
                structured_data: None,
            }]),
            available_on_nodes: Some(node_selector::for_node(&handle.node_name)),
            shareable: Some(true),
        });
        let ns = claim.namespace().unwrap_or_default();
        let written = self
            .claims_api(&ns)
            .replace_status(&claim.name_any(), &PostParams::default(), &updated)
            .await
            .map_err(Error::Kube)?;
        let uid = written.uid().unwrap_or_default();
        ledger.written.insert(
            uid,
            Written {
                claim: Arc::new(written),
                at: Instant::now(),
            },
        );
        self.metrics.allocations.inc();
        tracing::info!(
            claim = %ObjectRef::from_obj(claim),
            node = %handle.node_name,
            devices = ?handle.devices,
            "allocated"
        );
        self.event(
            claim,
            EventType::Normal,
            "Allocated",
            format!(
                "allocated {} device(s) on node {}",
                handle.devices.len(),
                handle.node_name
            ),
        )
        .await;
        Ok(())
    }

    /// Clears the allocation (and `deallocationRequested`), then drops the finalizer if
    /// the claim is being deleted or deallocation was requested.
    pub(super) async fn deallocate(&self, claim: &ResourceClaim) -> Result<Action> {
        if !claim.reserved_for().is_empty() && claim.is_allocated() {
            // Still in use: the scheduler or the claim controller clears reservedFor first.
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        let mut current = claim.clone();
        if claim.is_allocated() || claim.deallocation_requested() {
            let mut updated = claim.clone();
            if let Some(status) = updated.status.as_mut() {
                status.allocation = None;
                status.driver_name = None;
                status.deallocation_requested = None;
            }
            let ns = claim.namespace().unwrap_or_default();
            let mut ledger = self.ledger.lock().await;
            let written = self
                .claims_api(&ns)
                .replace_status(&claim.name_any(), &PostParams::default(), &updated)
                .await
                .map_err(Error::Kube)?;
            let uid = written.uid().unwrap_or_default();
            current = written.clone();
            ledger.written.insert(
                uid,
                Written {
                    claim: Arc::new(written),
                    at: Instant::now(),
                },
            );
            drop(ledger);
            if claim.is_allocated() {
                self.metrics.deallocations.inc();
                tracing::info!(claim = %ObjectRef::from_obj(claim), "deallocated");
            }
        }
        // Nothing is allocated any more: the finalizer has done its job.
        self.remove_finalizer(&current).await?;
        Ok(Action::await_change())
    }

    pub(super) async fn allocate_immediate(
        &self,
        claim: &ResourceClaim,
        resolved: &Resolved,
    ) -> Result<Action> {
        let claim = self.add_finalizer(claim).await?;
        let mut ledger = self.ledger.lock().await;
        let mut view = self.view(&mut ledger);
        view.check_satisfiable(&resolved.request)
            .map_err(Problem::from)?;
        let uid = claim.uid().unwrap_or_default();
        let ask = ClaimAsk {
            request: &resolved.request,
            suitable_nodes: resolved.suitable_nodes.as_ref(),
        };
        let Some(handle) = view.allocate(&uid, &ask) else {
            return Err(Error::NoCapacity);
        };
        self.write_allocation(&mut ledger, &claim, &handle).await?;
        Ok(Action::await_change())
    }
}
