//! The two reconcilers: a ResourceClaim (Immediate allocation, deallocation, finalizer)
//! and a PodSchedulingContext (unsuitable nodes, allocation on the selected node).

use super::*;

/// Reconciles one ResourceClaim.
pub(super) async fn reconcile_claim(
    claim: Arc<ResourceClaim>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile_claim_inner(&claim, &ctx).await;
    ctx.metrics
        .reconcile_seconds
        .get_or_create(&ControllerLabel {
            controller: "resourceclaim",
        })
        .observe(started.elapsed().as_secs_f64());
    ctx.update_claim_gauges();
    if result.is_ok() {
        ctx.succeeded(&ObjectRef::from_obj(claim.as_ref()).to_string());
    }
    result
}

pub(super) async fn reconcile_claim_inner(claim: &ResourceClaim, ctx: &Context) -> Result<Action> {
    let has_finalizer = claim.has_finalizer(&ctx.config.finalizer());
    let class = ctx.is_ours(claim);
    if class.is_none() && !has_finalizer {
        return Ok(Action::await_change());
    }
    if claim.is_being_deleted() || claim.deallocation_requested() {
        let ours = claim
            .status
            .as_ref()
            .and_then(|s| s.driver_name.as_deref())
            .is_none_or(|d| d == ctx.config.driver_name);
        if !ours && !has_finalizer {
            return Ok(Action::await_change());
        }
        return ctx.deallocate(claim).await;
    }
    if claim.is_allocated() {
        return Ok(Action::await_change());
    }
    let Some(class) = class else {
        // Our finalizer but the class is gone or no longer ours: nothing to allocate.
        return Ok(Action::await_change());
    };
    let resolved = ctx.resolve(claim, &class).await?;
    match claim.spec.allocation_mode() {
        AllocationMode::WaitForFirstConsumer => Ok(Action::await_change()),
        AllocationMode::Immediate => match ctx.allocate_immediate(claim, &resolved).await {
            Err(Error::Parameters(problem)) => Err(ctx.report(claim, problem).await),
            Err(Error::NoCapacity) => {
                ctx.event(
                    claim,
                    EventType::Warning,
                    "NoCapacity",
                    format!(
                        "no Ready node the class allows has {} free device(s){}; retrying",
                        resolved.request.count,
                        resolved
                            .request
                            .model
                            .as_ref()
                            .map(|m| format!(" of model {m:?}"))
                            .unwrap_or_default()
                    ),
                )
                .await;
                Err(Error::NoCapacity)
            }
            other => other,
        },
    }
}

/// Reconciles one PodSchedulingContext.
pub(super) async fn reconcile_psc(
    psc: Arc<PodSchedulingContext>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile_psc_inner(&psc, &ctx).await;
    ctx.metrics
        .reconcile_seconds
        .get_or_create(&ControllerLabel {
            controller: "podschedulingcontext",
        })
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.succeeded(&ObjectRef::from_obj(psc.as_ref()).to_string());
    }
    result
}

pub(super) async fn reconcile_psc_inner(
    psc: &PodSchedulingContext,
    ctx: &Context,
) -> Result<Action> {
    if psc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = psc.namespace().unwrap_or_default();
    let pods: Api<DraPod> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(pod) = pods.get_opt(&psc.name_any()).await.map_err(Error::Kube)? else {
        return Ok(Action::await_change());
    };
    let mut pending: Vec<(String, Arc<ResourceClaim>, Resolved)> = Vec::new();
    let mut waiting = false;
    for pod_claim in pod.resource_claims() {
        let Some((claim_name, must_be_the_pods)) = pod.claim_name_any_release(&pod_claim.name)
        else {
            waiting = true;
            continue;
        };
        let Some(claim) = ctx.claims.get(&ObjectRef::new(&claim_name).within(&ns)) else {
            waiting = true;
            continue;
        };
        if must_be_the_pods && !pod.controls(claim.metadata.owner_references.as_deref()) {
            // Not (yet) the claim generated for this pod.
            waiting = true;
            continue;
        }
        let Some(class) = ctx.is_ours(&claim) else {
            continue;
        };
        if claim.is_allocated()
            || claim.is_being_deleted()
            || claim.deallocation_requested()
            || claim.spec.allocation_mode() != AllocationMode::WaitForFirstConsumer
        {
            continue;
        }
        let resolved = ctx.resolve(&claim, &class).await?;
        pending.push((pod_claim.name.clone(), claim, resolved));
    }
    if pending.is_empty() {
        return Ok(if waiting {
            Action::requeue(Duration::from_secs(2))
        } else {
            Action::await_change()
        });
    }
    {
        let mut ledger = ctx.ledger.lock().await;
        let view = ctx.view(&mut ledger);
        drop(ledger);
        for (_, claim, resolved) in &pending {
            if let Err(e) = view.check_satisfiable(&resolved.request) {
                return Err(ctx.report(claim, Problem::from(e)).await);
            }
        }
    }

    let selected = psc.spec.selected_node.as_deref();
    if selected.is_some() {
        // The finalizer goes on before anything is allocated, so a claim deleted while its
        // allocation is in flight still waits for us to clean up.
        for (_, claim, _) in pending.iter_mut() {
            if !claim.has_finalizer(&ctx.config.finalizer()) {
                *claim = Arc::new(ctx.add_finalizer(claim).await?);
            }
        }
    }

    let mut ledger = ctx.ledger.lock().await;
    let mut view = ctx.view(&mut ledger);
    let asks: Vec<ClaimAsk<'_>> = pending
        .iter()
        .map(|(_, _, r)| ClaimAsk {
            request: &r.request,
            suitable_nodes: r.suitable_nodes.as_ref(),
        })
        .collect();

    if let Some(node) = selected {
        let uids: Vec<String> = pending
            .iter()
            .map(|(_, c, _)| c.uid().unwrap_or_default())
            .collect();
        let uid_refs: Vec<&str> = uids.iter().map(String::as_str).collect();
        match view.allocate_on(node, &uid_refs, &asks) {
            Ok(handles) => {
                for ((_, claim, _), handle) in pending.iter().zip(handles) {
                    ctx.write_allocation(&mut ledger, claim, &handle).await?;
                }
                return Ok(Action::await_change());
            }
            Err(e) => {
                tracing::info!(pod = %psc.name_any(), node, reason = %e, "selected node is unsuitable");
            }
        }
    }

    let potential: Vec<String> = psc
        .spec
        .potential_nodes
        .clone()
        .unwrap_or_default()
        .into_iter()
        .take(MAX_SCHEDULING_NODES)
        .collect();
    let unsuitable: Vec<String> = view
        .unsuitable_nodes(&potential, &asks)
        .into_iter()
        .map(str::to_owned)
        .collect();
    drop(ledger);
    let ours: Vec<&str> = pending.iter().map(|(n, _, _)| n.as_str()).collect();
    let mut entries: Vec<ResourceClaimSchedulingStatus> = psc
        .status
        .as_ref()
        .and_then(|s| s.resource_claims.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !ours.contains(&e.name.as_str()))
        .collect();
    for name in ours {
        entries.push(ResourceClaimSchedulingStatus {
            name: name.to_owned(),
            unsuitable_nodes: Some(unsuitable.clone()),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let new_status = PodSchedulingContextStatus {
        resource_claims: Some(entries),
    };
    if psc.status.as_ref() != Some(&new_status) {
        let mut updated = psc.clone();
        updated.status = Some(new_status);
        let api: Api<PodSchedulingContext> = Api::namespaced(ctx.client.clone(), &ns);
        api.replace_status(&psc.name_any(), &PostParams::default(), &updated)
            .await
            .map_err(Error::Kube)?;
        tracing::info!(pod = %psc.name_any(), ?unsuitable, "updated unsuitable nodes");
    }
    // Free devices change without this object changing; look again soon.
    Ok(Action::requeue(Duration::from_secs(5)))
}
