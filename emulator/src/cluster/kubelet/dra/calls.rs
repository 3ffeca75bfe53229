//! The DRA gRPC calls of the kubelet's DRA manager: NodePrepareResources and
//! NodeUnprepareResources through whichever service the plugin and the release share,
//! and the checks the kubelet makes on the answers.

use super::*;

/// Awaits a DRA call within the kubelet's timeout.
pub(super) async fn timed<T>(
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<Result<T, tonic::Status>, String> {
    tokio::time::timeout(DRA_CALL_TIMEOUT, call)
        .await
        .map(|r| r.map(tonic::Response::into_inner))
        .map_err(|_| "context deadline exceeded".to_string())
}

/// The devices each claim of `batch` got from `driver`, by claim uid.
pub(super) type Answers = Vec<(String, Vec<DeviceInfo>)>;

pub(super) fn classic_device(cdi_ids: Vec<String>) -> Vec<DeviceInfo> {
    vec![DeviceInfo {
        request_names: Vec::new(),
        cdi_ids,
    }]
}

/// Checks a batch's per-claim answers as `prepareResources` does: an answer for a claim
/// not asked about or a per-claim error fails, so does a claim left out.
pub(super) fn check_answers(
    batch: &[&ClaimInfo],
    answers: Vec<(String, String, Vec<DeviceInfo>)>,
    call: &str,
    names_resource_claims: bool,
) -> Result<Answers, String> {
    let mut out = Vec::new();
    let answered = answers.len();
    for (uid, error, devices) in answers {
        let Some(claim) = batch.iter().find(|c| c.uid == uid) else {
            return Err(format!(
                "{call} returned result for unknown claim UID {uid}"
            ));
        };
        if !error.is_empty() {
            return Err(if names_resource_claims {
                format!("{call} failed for ResourceClaim {}: {error}", claim.name)
            } else {
                format!(
                    "{call} failed for claim {}/{}: {error}",
                    claim.namespace, claim.name
                )
            });
        }
        out.push((uid, devices));
    }
    let unfinished = batch.len().saturating_sub(answered);
    if unfinished != 0 {
        return Err(if names_resource_claims {
            format!("{call} skipped {unfinished} ResourceClaims")
        } else {
            format!("{call} left out {unfinished} claims")
        });
    }
    Ok(out)
}

macro_rules! structured_prepare {
    ($module:ident, $channel:expr, $batch:expr) => {{
        use dra_kubelet_proto::$module as api;
        let mut client = api::dra_plugin_client::DraPluginClient::new($channel);
        let claims = $batch
            .iter()
            .map(|c| api::Claim {
                namespace: c.namespace.clone(),
                uid: c.uid.clone(),
                name: c.name.clone(),
            })
            .collect();
        let response =
            timed(client.node_prepare_resources(api::NodePrepareResourcesRequest { claims }))
                .await?
                .map_err(|s| format!("NodePrepareResources: {}", s.message()))?;
        response
            .into_map()
            .into_iter()
            .map(|(uid, r)| {
                let devices = r
                    .devices
                    .into_iter()
                    .map(|d| DeviceInfo {
                        request_names: d.request_names,
                        cdi_ids: d.cdi_device_ids,
                    })
                    .collect();
                (uid, r.error, devices)
            })
            .collect::<Vec<_>>()
    }};
}

macro_rules! structured_unprepare {
    ($module:ident, $channel:expr, $batch:expr) => {{
        use dra_kubelet_proto::$module as api;
        let mut client = api::dra_plugin_client::DraPluginClient::new($channel);
        let claims = $batch
            .iter()
            .map(|c| api::Claim {
                namespace: c.namespace.clone(),
                uid: c.uid.clone(),
                name: c.name.clone(),
            })
            .collect();
        let response =
            timed(client.node_unprepare_resources(api::NodeUnprepareResourcesRequest { claims }))
                .await?
                .map_err(|s| format!("NodeUnprepareResources: {}", s.message()))?;
        response
            .into_map()
            .into_iter()
            .map(|(uid, r)| (uid, r.error, Vec::new()))
            .collect::<Vec<_>>()
    }};
}

pub(super) fn v1alpha3_claims(batch: &[&ClaimInfo], driver: &str) -> Vec<v1alpha3::Claim> {
    batch
        .iter()
        .flat_map(|c| {
            c.handles
                .iter()
                .filter(|(d, _)| d == driver)
                .map(|(_, data)| v1alpha3::Claim {
                    namespace: c.namespace.clone(),
                    uid: c.uid.clone(),
                    name: c.name.clone(),
                    resource_handle: data.clone(),
                })
        })
        .collect()
}

/// One driver's `NodePrepareResources` (or 1.27's per-claim `NodePrepareResource`).
pub(super) async fn call_prepare(
    release: Release,
    plugin: &PluginInstance,
    driver: &str,
    batch: &[&ClaimInfo],
) -> Result<Answers, String> {
    let channel = dial(release.0, &plugin.endpoint, Socket::Dra).await?;
    match plugin.api {
        PluginApi::V1 => {
            let answers = structured_prepare!(dra_v1, channel, batch);
            check_answers(
                batch,
                answers,
                "NodePrepareResources",
                release.dra_errors_name_resource_claims(),
            )
        }
        PluginApi::V1Beta1 => {
            let answers = structured_prepare!(dra_v1beta1, channel, batch);
            check_answers(
                batch,
                answers,
                "NodePrepareResources",
                release.dra_errors_name_resource_claims(),
            )
        }
        PluginApi::Classic => {
            let claims = v1alpha3_claims(batch, driver);
            if !release.single_claim_service_only() {
                let mut batched = v1alpha3::node_client::NodeClient::new(channel.clone());
                match timed(
                    batched.node_prepare_resources(v1alpha3::NodePrepareResourcesRequest {
                        claims: claims.clone(),
                    }),
                )
                .await?
                {
                    Ok(response) => {
                        let answers = response
                            .into_map()
                            .into_iter()
                            .map(|(uid, r)| (uid, r.error, classic_device(r.cdi_devices)))
                            .collect();
                        return check_answers(batch, answers, "NodePrepareResources", false);
                    }
                    Err(status) if status.code() == tonic::Code::Unimplemented => {}
                    Err(status) => {
                        return Err(format!("NodePrepareResources failed: {}", status.message()));
                    }
                }
            }
            // `v1alpha2.Node`: one claim and handle per call.
            let mut single = v1alpha2::node_client::NodeClient::new(channel);
            let mut answers: Answers = Vec::new();
            for c in claims {
                let request = v1alpha2::NodePrepareResourceRequest {
                    namespace: c.namespace,
                    claim_uid: c.uid.clone(),
                    claim_name: c.name.clone(),
                    resource_handle: c.resource_handle.clone(),
                };
                let response = timed(single.node_prepare_resource(request))
                    .await?
                    .map_err(|s| {
                        format!(
                            "NodePrepareResource failed, claim UID: {}, claim name: {}, resource handle: {}, err: {}",
                            c.uid, c.name, c.resource_handle, s.message()
                        )
                    })?;
                match answers.iter_mut().find(|(uid, _)| uid == &c.uid) {
                    Some((_, devices)) => devices.extend(classic_device(response.cdi_devices)),
                    None => answers.push((c.uid, classic_device(response.cdi_devices))),
                }
            }
            Ok(answers)
        }
    }
}

/// One driver's `NodeUnprepareResources` (or 1.27's per-claim `NodeUnprepareResource`).
pub(super) async fn call_unprepare(
    release: Release,
    plugin: &PluginInstance,
    driver: &str,
    batch: &[&ClaimInfo],
) -> Result<(), String> {
    let channel = dial(release.0, &plugin.endpoint, Socket::Dra).await?;
    match plugin.api {
        PluginApi::V1 => {
            let answers = structured_unprepare!(dra_v1, channel, batch);
            check_answers(
                batch,
                answers,
                "NodeUnprepareResources",
                release.dra_errors_name_resource_claims(),
            )
            .map(drop)
        }
        PluginApi::V1Beta1 => {
            let answers = structured_unprepare!(dra_v1beta1, channel, batch);
            check_answers(
                batch,
                answers,
                "NodeUnprepareResources",
                release.dra_errors_name_resource_claims(),
            )
            .map(drop)
        }
        PluginApi::Classic => {
            let claims = v1alpha3_claims(batch, driver);
            if !release.single_claim_service_only() {
                let mut batched = v1alpha3::node_client::NodeClient::new(channel.clone());
                match timed(batched.node_unprepare_resources(
                    v1alpha3::NodeUnprepareResourcesRequest {
                        claims: claims.clone(),
                    },
                ))
                .await?
                {
                    Ok(response) => {
                        let answers = response
                            .into_map()
                            .into_iter()
                            .map(|(uid, r)| (uid, r.error, Vec::new()))
                            .collect();
                        return check_answers(batch, answers, "NodeUnprepareResources", false)
                            .map(drop);
                    }
                    Err(status) if status.code() == tonic::Code::Unimplemented => {}
                    Err(status) => {
                        return Err(format!(
                            "NodeUnprepareResources failed: {}",
                            status.message()
                        ));
                    }
                }
            }
            let mut single = v1alpha2::node_client::NodeClient::new(channel);
            for c in claims {
                let request = v1alpha2::NodeUnprepareResourceRequest {
                    namespace: c.namespace,
                    claim_uid: c.uid.clone(),
                    claim_name: c.name.clone(),
                    resource_handle: c.resource_handle,
                };
                timed(single.node_unprepare_resource(request))
                    .await?
                    .map_err(|s| {
                        format!(
                            "NodeUnprepareResource failed, claim UID: {}, claim name: {}, err: {}",
                            c.uid,
                            c.name,
                            s.message()
                        )
                    })?;
            }
            Ok(())
        }
    }
}
