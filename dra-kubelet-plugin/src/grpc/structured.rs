//! Structured DRA (Kubernetes 1.32+): the `dra.v1beta1.DRAPlugin` and `dra.v1.DRAPlugin`
//! services, one handler for both, reading each claim's allocation from the API.

use super::*;

/// How many claims of one structured batch are read from the API at a time.
pub(super) const MAX_CONCURRENT_READS: usize = 16;

/// One prepared device of a structured claim, version-neutral.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceOutcome {
    /// The request it was allocated for, without a `/subrequest`: containers name
    /// requests, and the kubelet matches `request_names` against what they name
    /// (`stripSubrequestNames` of the upstream kubeletplugin helper).
    pub request: String,
    /// The share of a device that allows multiple allocations.
    pub share_id: Option<String>,
    /// The pool (this node's, or one of its own the driver put the device in).
    pub pool: String,
    /// The device name in the pool.
    pub device: String,
    /// The CDI ids to inject for it.
    pub cdi_device_ids: Vec<String>,
}

/// The structured `DRAPlugin` service (v1beta1 and v1): reads each claim's allocation
/// from the API, lets the profile read it, then prepares through the same path as
/// classic.
#[derive(Debug)]
pub struct DraPluginService<D: DeviceProfile> {
    /// The shared prepare/unprepare path.
    pub node: NodeService<D>,
    /// Where claims are read.
    pub claims: ClaimReader,
    /// Our driver name, to pick our results.
    pub driver_name: String,
    /// This node: its pool.
    pub node_name: String,
    /// What may delay or refuse a call.
    pub hook: Arc<dyn FaultHook>,
    /// Device metadata files, if the driver opted in.
    pub metadata: Option<Arc<crate::device_metadata::MetadataWriter>>,
}

impl<D: DeviceProfile> Clone for DraPluginService<D> {
    fn clone(&self) -> Self {
        Self {
            node: self.node.clone(),
            claims: self.claims.clone(),
            driver_name: self.driver_name.clone(),
            node_name: self.node_name.clone(),
            hook: self.hook.clone(),
            metadata: self.metadata.clone(),
        }
    }
}

/// A claim's devices of this driver and the name its pod gives it.
type Allocated = (Vec<crate::claim_data::AllocatedDevice>, Option<String>);

/// A structured claim as the profile read it, with the devices the kubelet asks about.
pub(super) struct ReadClaim<P> {
    claim: ClaimRef,
    prepared: P,
    devices: Vec<crate::claim_data::AllocatedDevice>,
    /// For the device metadata files' container path.
    pod_claim_name: Option<String>,
}

impl<D: DeviceProfile> DraPluginService<D> {
    /// Reads one claim and lets the profile say what preparing it means.
    async fn read(&self, claim: ClaimRef) -> Outcome<ReadClaim<D::Prepared>> {
        let fetched = self
            .claims
            .get(&claim.namespace, &claim.name)
            .await
            .map_err(|e| ClaimError::Read {
                claim: claim.to_string(),
                reason: e.to_string(),
            })?;
        let allocation = allocation::ours(&self.driver_name, &self.node_name, &claim, &fetched)?;
        let pod_claim_name = fetched.pod_claim_name;
        let devices: Vec<String> = allocation
            .devices
            .iter()
            .map(|d| d.device.clone())
            .collect();
        self.hook
            .before_prepare(&claim, &devices)
            .await
            .map_err(|refusal| ClaimError::Injected {
                claim: claim.to_string(),
                fault: refusal.by,
                message: refusal.message,
            })?;
        let device_error = |source| ClaimError::Device {
            claim: claim.to_string(),
            source,
        };
        let allocation =
            crate::opaque::decode_allocation::<D::Config>(&self.driver_name, allocation)
                .map_err(device_error)?;
        let prepared = self
            .node
            .store
            .profile()
            .prepare_allocation(&claim, &allocation)
            .map_err(device_error)?;
        Ok(ReadClaim {
            claim,
            prepared,
            devices: allocation.devices,
            pod_claim_name,
        })
    }

    /// Prepares a batch; one outcome per claim, in order. A claim that cannot be read or
    /// resolved fails alone; the others go on. The claims are read concurrently — a few
    /// API round trips for the batch instead of one per claim — but at most
    /// [`MAX_CONCURRENT_READS`] at a time, so a huge batch cannot open a connection per
    /// claim.
    pub async fn prepare(
        &self,
        claims: Vec<Outcome<ClaimRef>>,
    ) -> Result<Vec<Outcome<Vec<DeviceOutcome>>>, Status> {
        let reads: Vec<_> = claims
            .into_iter()
            .map(|c| async move {
                match c {
                    Ok(claim) => self.read(claim).await,
                    Err(e) => Err(e),
                }
            })
            .collect();
        let read: Vec<Outcome<ReadClaim<D::Prepared>>> = futures::stream::iter(reads)
            .buffered(MAX_CONCURRENT_READS)
            .collect()
            .await;
        let mut allocated = Vec::with_capacity(read.len());
        let mut to_prepare = Vec::with_capacity(read.len());
        for r in read {
            match r {
                Ok(r) => {
                    allocated.push((r.devices, r.pod_claim_name));
                    to_prepare.push(Ok((r.claim, r.prepared)));
                }
                Err(e) => {
                    allocated.push((Vec::new(), None));
                    to_prepare.push(Err(e));
                }
            }
        }
        let outcomes = self.node.prepare(to_prepare).await?;
        self.report_status(&outcomes);
        let metadata_ids = self.write_metadata(&outcomes, &allocated).await;
        Ok(outcomes
            .into_iter()
            .zip(allocated)
            .zip(metadata_ids)
            .map(|((o, (devices, _)), ids)| {
                let (claim, prepared) = o?;
                let mut outcomes = self.device_outcomes(&claim, &prepared, devices)?;
                add_metadata_ids(&mut outcomes, ids?);
                Ok(outcomes)
            })
            .collect())
    }

    /// Writes the device metadata files of the claims just prepared, if the driver opted
    /// in; per claim, the CDI id of each request's file (none without metadata). A claim
    /// whose files cannot be written fails (a container that expects the file would not
    /// find it) but stays prepared: the kubelet's retry writes them again.
    async fn write_metadata(
        &self,
        outcomes: &[Outcome<(ClaimRef, D::Prepared)>],
        allocated: &[Allocated],
    ) -> Vec<Outcome<BTreeMap<String, String>>> {
        let Some(writer) = self.metadata.clone() else {
            return vec![Ok(BTreeMap::new()); outcomes.len()];
        };
        let claims: Vec<Option<(ClaimRef, Allocated)>> = outcomes
            .iter()
            .zip(allocated)
            .map(|(o, a)| o.as_ref().ok().map(|(claim, _)| (claim.clone(), a.clone())))
            .collect();
        // The attributes of the allocated devices as published now, looked up once for
        // the batch (only theirs are kept of a pool that may hold thousands).
        let wanted: std::collections::BTreeSet<&str> = claims
            .iter()
            .flatten()
            .flat_map(|(_, (devices, _))| devices.iter().map(|d| d.device.as_str()))
            .collect();
        let published: BTreeMap<String, BTreeMap<String, crate::model::Attribute>> = self
            .node
            .store
            .profile()
            .slice_devices()
            .into_iter()
            .filter(|d| wanted.contains(d.name.as_str()))
            .map(|d| (d.name, d.attributes))
            .collect();
        let pool = self.node_name.clone();
        let written = tokio::task::spawn_blocking(move || {
            claims
                .iter()
                .map(|c| {
                    let Some((claim, (devices, pod_claim_name))) = c else {
                        return Ok(BTreeMap::new());
                    };
                    writer.write(&crate::device_metadata::ClaimMetadata {
                        claim,
                        pod_claim_name: pod_claim_name.as_deref(),
                        pool: &pool,
                        devices: devices
                            .iter()
                            .map(|d| (d, published.get(&d.device).cloned().unwrap_or_default()))
                            .collect(),
                    })
                })
                .collect::<Vec<_>>()
        })
        .await;
        written.unwrap_or_else(|e| {
            let failed = ClaimError::Read {
                claim: String::new(),
                reason: format!("device metadata: the writing task failed: {e}"),
            };
            vec![Err(failed); outcomes.len()]
        })
    }

    /// Writes what the profile says of the devices of the claims just prepared, on a task
    /// of its own: the kubelet's answer does not wait for it, and a failure is logged (the
    /// claim is prepared whatever its status).
    fn report_status(&self, outcomes: &[Outcome<(ClaimRef, D::Prepared)>]) {
        let prepared: Vec<(ClaimRef, D::Prepared)> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok().cloned())
            .collect();
        if prepared.is_empty() {
            return;
        }
        let service = self.clone();
        tokio::spawn(async move {
            let store = &service.node.store;
            for (claim, p) in prepared {
                let dir = store.state_dir(&claim.uid);
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                let work = crate::profile::DeviceWork::new(&claim, &p, &dir, deadline);
                let statuses = store.profile().device_status(&work).await;
                if statuses.is_empty() {
                    continue;
                }
                match crate::claim_status::write(
                    service.claims.client(),
                    service.claims.api(),
                    &service.driver_name,
                    &service.node_name,
                    &claim,
                    &statuses,
                )
                .await
                {
                    Ok(true) => {
                        info!(claim = %claim, devices = statuses.len(), "claim's device status written")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        warn!(claim = %claim, error = %e, "the claim's device status was not written")
                    }
                }
            }
        });
    }

    /// Unprepares claims after the hook had its say about each (a claim it refuses is
    /// left prepared, as when the kubelet's call fails).
    pub async fn unprepare(
        &self,
        claims: Vec<Outcome<ClaimRef>>,
    ) -> Result<Vec<Outcome<()>>, Status> {
        let mut gated = Vec::with_capacity(claims.len());
        for c in claims {
            let Ok(claim) = c else {
                gated.push(c);
                continue;
            };
            let devices = self.node.store.allocated_devices(&claim.uid);
            let verdict = self.hook.before_unprepare(&claim, &devices).await;
            gated.push(match verdict {
                Ok(()) => self.remove_metadata(claim).await,
                Err(refusal) => Err(ClaimError::Injected {
                    claim: claim.to_string(),
                    fault: refusal.by,
                    message: refusal.message,
                }),
            });
        }
        self.node.unprepare(gated).await
    }

    /// Removes a claim's device metadata files, before the claim leaves the checkpoint
    /// (files never outlive the claim's record, so a restart finds no stale ones).
    async fn remove_metadata(&self, claim: ClaimRef) -> Outcome<ClaimRef> {
        let Some(writer) = self.metadata.clone() else {
            return Ok(claim);
        };
        let name = claim.to_string();
        tokio::task::spawn_blocking(move || writer.remove(&claim).map(|()| claim))
            .await
            .unwrap_or_else(|e| {
                Err(ClaimError::Read {
                    claim: name,
                    reason: format!("device metadata: the removing task failed: {e}"),
                })
            })
    }

    /// Each allocated device answers with the common device and the profile's devices for
    /// it, so the kubelet can give a container the devices of the requests it names.
    fn device_outcomes(
        &self,
        claim: &ClaimRef,
        prepared: &D::Prepared,
        devices: Vec<crate::claim_data::AllocatedDevice>,
    ) -> Outcome<Vec<DeviceOutcome>> {
        let profile = self.node.store.profile();
        devices
            .into_iter()
            .map(|d| {
                let names = profile
                    .device_cdi_devices(&claim.uid, prepared, &d)
                    .ok_or_else(|| ClaimError::Cdi {
                        claim: claim.to_string(),
                        source: Box::new(crate::cdi_spec::SpecError::NoDeviceFor(d.device.clone())),
                    })?;
                let cdi_device_ids = self.node.store.qualified_ids(names);
                Ok(DeviceOutcome {
                    request: d.base_request().to_owned(),
                    share_id: d.share_id.clone(),
                    pool: if d.pool.is_empty() {
                        self.node_name.clone()
                    } else {
                        d.pool
                    },
                    device: d.device,
                    cdi_device_ids,
                })
            })
            .collect()
    }
}

/// Adds each request's metadata CDI id to the first device of that request, as the
/// upstream helper does: the runtime mounts the file once per container.
fn add_metadata_ids(outcomes: &mut [DeviceOutcome], mut ids: BTreeMap<String, String>) {
    for outcome in outcomes {
        if let Some(id) = ids.remove(&outcome.request) {
            outcome.cdi_device_ids.push(id);
        }
    }
}

/// Both `DRAPlugin` packages have the same messages: one implementation per package,
/// converting to and from the neutral types.
macro_rules! dra_plugin {
    ($pkg:ident, $set_share:expr) => {
        // `..Default::default()` fills v1's `share_id` (set after); v1beta1 has none.
        #[allow(clippy::needless_update)]
        #[tonic::async_trait]
        impl<D: DeviceProfile> $pkg::dra_plugin_server::DraPlugin for DraPluginService<D> {
            async fn node_prepare_resources(
                &self,
                request: Request<$pkg::NodePrepareResourcesRequest>,
            ) -> Result<Response<$pkg::NodePrepareResourcesResponse>, Status> {
                let start = Instant::now();
                let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
                let refs = claims
                    .iter()
                    .map(|c| ClaimRef::new(&c.uid, &c.namespace, &c.name).map_err(ClaimError::from))
                    .collect();
                let outcomes = self.prepare(refs).await?;
                let mut response = $pkg::NodePrepareResourcesResponse::default();
                for (uid, error) in refused {
                    self.node
                        .metrics
                        .claim::<()>("prepare", &Err(error.clone()));
                    response.insert(
                        uid,
                        $pkg::NodePrepareResourceResponse {
                            devices: vec![],
                            error: error.to_string(),
                        },
                    );
                }
                for (claim, outcome) in claims.into_iter().zip(outcomes) {
                    let entry = match outcome {
                        Ok(devices) => $pkg::NodePrepareResourceResponse {
                            devices: devices
                                .into_iter()
                                .map(|d| {
                                    let mut device = $pkg::Device {
                                        request_names: vec![d.request],
                                        pool_name: d.pool,
                                        device_name: d.device,
                                        cdi_device_ids: d.cdi_device_ids,
                                        ..Default::default()
                                    };
                                    let set_share: fn(&mut $pkg::Device, Option<String>) =
                                        $set_share;
                                    set_share(&mut device, d.share_id);
                                    device
                                })
                                .collect(),
                            error: String::new(),
                        },
                        Err(e) => $pkg::NodePrepareResourceResponse {
                            devices: vec![],
                            error: e.to_string(),
                        },
                    };
                    response.insert(claim.uid, entry);
                }
                self.node
                    .metrics
                    .observe("NodePrepareResources", start.elapsed().as_secs_f64());
                Ok(Response::new(response))
            }

            async fn node_unprepare_resources(
                &self,
                request: Request<$pkg::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$pkg::NodeUnprepareResourcesResponse>, Status> {
                let start = Instant::now();
                let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
                let refs = claims
                    .iter()
                    .map(|c| ClaimRef::new(&c.uid, &c.namespace, &c.name).map_err(ClaimError::from))
                    .collect();
                let outcomes = self.unprepare(refs).await?;
                let mut response = $pkg::NodeUnprepareResourcesResponse::default();
                for (uid, error) in refused {
                    self.node
                        .metrics
                        .claim::<()>("unprepare", &Err(error.clone()));
                    response.insert(
                        uid,
                        $pkg::NodeUnprepareResourceResponse {
                            error: error.to_string(),
                        },
                    );
                }
                for (claim, outcome) in claims.into_iter().zip(outcomes) {
                    response.insert(
                        claim.uid,
                        $pkg::NodeUnprepareResourceResponse {
                            error: outcome.err().map(|e| e.to_string()).unwrap_or_default(),
                        },
                    );
                }
                self.node
                    .metrics
                    .observe("NodeUnprepareResources", start.elapsed().as_secs_f64());
                Ok(Response::new(response))
            }
        }
    };
}

// v1beta1 (1.32/1.33) has no `share_id`: those kubelets know no shared devices.
dra_plugin!(dra_v1beta1, |_, _| {});
// v1 `share_id` (field 5, kubelet 1.35+): the share of a device allocated to several claims.
dra_plugin!(dra_v1, |device, share| device.share_id = share);
