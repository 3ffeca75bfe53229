//! A kubelet, as far as a DRA plugin sees one: it finds the plugin's registration socket,
//! asks `GetInfo`, says `NotifyRegistrationStatus`, then dials the DRA socket the plugin
//! named and calls `NodePrepareResources`, `NodeUnprepareResources` and the device health
//! stream, over the plugin's real unix sockets, with the `:authority` a kubelet sends.
//!
//! It refuses, before sending, what a kubelet never sends: a call before registration, a
//! claim uid that is not a UUID (the kubelet sends `metadata.uid`), a request over the
//! gRPC message limit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dra_kubelet_proto::{
    SUPPORTED_HEALTH_V1, SUPPORTED_HEALTH_V1ALPHA1, SUPPORTED_V1, SUPPORTED_V1BETA1, dra_health_v1,
    dra_health_v1alpha1, dra_v1, dra_v1beta1, pluginregistration as reg,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use prost::Message;
use tonic::transport::Channel;

use crate::KitError;

/// The largest gRPC message a plugin takes and a kubelet reads: 4 MiB, grpc-go's default
/// (`defaultServerMaxReceiveMessageSize`, `defaultClientMaxReceiveMessageSize`), which
/// neither the kubelet's DRA client nor upstream's plugin helper changes, and tonic's
/// default too. A kubelet sends bigger requests (its send limit is `math.MaxInt32`), and
/// the plugin refuses them with `ResourceExhausted`.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// A claim as the kubelet names it in a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// `metadata.uid`: a UUID.
    pub uid: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl Claim {
    /// Claim `namespace/name` with `uid`.
    pub fn new(
        uid: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            uid: uid.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The claim an API object names.
    pub fn of(claim: &k8s_openapi::api::resource::v1::ResourceClaim) -> Self {
        Self::new(
            claim.metadata.uid.clone().unwrap_or_default(),
            claim.metadata.namespace.clone().unwrap_or_default(),
            claim.metadata.name.clone().unwrap_or_default(),
        )
    }
}

/// One device of a prepared claim, as the plugin answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedDevice {
    /// The requests it is for (no `/subrequest`).
    pub requests: Vec<String>,
    /// Its pool (the node).
    pub pool: String,
    /// Its name in the pool.
    pub device: String,
    /// The CDI ids a container using it gets.
    pub cdi_device_ids: Vec<String>,
    /// The share of a device that allows multiple allocations (`v1` only).
    pub share_id: Option<String>,
}

/// A device's health as the stream reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceHealth {
    /// Its pool.
    pub pool: String,
    /// Its name in the pool.
    pub device: String,
    /// `HEALTHY`, `UNHEALTHY` or `UNKNOWN`.
    pub health: &'static str,
    /// Why, if the plugin said.
    pub message: String,
}

/// Which `DRAPlugin` service a kubelet calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DraService {
    /// `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` (kubelets 1.34+).
    V1,
    /// `k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin` (kubelets 1.32+).
    V1beta1,
}

/// What registration found out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// `PluginInfo.name`: the driver name.
    pub driver: String,
    /// `PluginInfo.endpoint`: the DRA socket.
    pub endpoint: PathBuf,
    /// `PluginInfo.supported_versions`.
    pub supported_versions: Vec<String>,
    /// The service this kubelet calls.
    pub service: DraService,
}

#[derive(Debug)]
enum Client {
    V1(dra_v1::dra_plugin_client::DraPluginClient<Channel>),
    V1beta1(dra_v1beta1::dra_plugin_client::DraPluginClient<Channel>),
}

/// A kubelet of one node; see the module docs.
#[derive(Debug)]
pub struct Kubelet {
    registration_socket: PathBuf,
    newest: DraService,
    registered: Option<(Registered, Channel, Client)>,
}

fn check_uids(claims: &[Claim]) -> Result<(), KitError> {
    for c in claims {
        if uuid::Uuid::parse_str(&c.uid).is_err() {
            return Err(KitError::NotAUuid {
                uid: c.uid.chars().take(80).collect(),
            });
        }
    }
    Ok(())
}

fn check_size(call: &'static str, bytes: usize) -> Result<(), KitError> {
    if bytes > MAX_MESSAGE_BYTES {
        return Err(KitError::TooLarge {
            call,
            bytes,
            limit: MAX_MESSAGE_BYTES,
        });
    }
    Ok(())
}

/// The gRPC client calls of the two `DRAPlugin` packages, whose messages are the same.
macro_rules! prepare_call {
    ($pkg:ident, $client:expr, $claims:expr) => {{
        let request = $pkg::NodePrepareResourcesRequest {
            claims: $claims
                .iter()
                .map(|c| $pkg::Claim {
                    namespace: c.namespace.clone(),
                    uid: c.uid.clone(),
                    name: c.name.clone(),
                })
                .collect(),
        };
        check_size("NodePrepareResources", request.encoded_len())?;
        $client
            .node_prepare_resources(request)
            .await
            .map_err(|status| KitError::Call {
                call: "NodePrepareResources",
                status: Box::new(status),
            })?
            .into_inner()
            .into_map()
    }};
}

macro_rules! unprepare_call {
    ($pkg:ident, $client:expr, $claims:expr) => {{
        let request = $pkg::NodeUnprepareResourcesRequest {
            claims: $claims
                .iter()
                .map(|c| $pkg::Claim {
                    namespace: c.namespace.clone(),
                    uid: c.uid.clone(),
                    name: c.name.clone(),
                })
                .collect(),
        };
        check_size("NodeUnprepareResources", request.encoded_len())?;
        $client
            .node_unprepare_resources(request)
            .await
            .map_err(|status| KitError::Call {
                call: "NodeUnprepareResources",
                status: Box::new(status),
            })?
            .into_inner()
            .into_map()
            .into_iter()
            .map(|(uid, r)| {
                (
                    uid,
                    if r.error.is_empty() {
                        Ok(())
                    } else {
                        Err(r.error)
                    },
                )
            })
            .collect()
    }};
}

macro_rules! health_stream {
    ($pkg:ident, $channel:expr) => {{
        let mut client = $pkg::dra_resource_health_client::DraResourceHealthClient::new($channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let stream = client
            .node_watch_resources($pkg::NodeWatchResourcesRequest {})
            .await
            .map_err(|status| KitError::Call {
                call: "NodeWatchResources",
                status: Box::new(status),
            })?
            .into_inner();
        stream
            .map(|r| {
                r.map(|r| {
                    r.devices
                        .into_iter()
                        .map(|d| {
                            let id = d.device.unwrap_or_default();
                            DeviceHealth {
                                pool: id.pool_name,
                                device: id.device_name,
                                health: match $pkg::HealthStatus::try_from(d.health) {
                                    Ok($pkg::HealthStatus::Healthy) => "HEALTHY",
                                    Ok($pkg::HealthStatus::Unhealthy) => "UNHEALTHY",
                                    _ => "UNKNOWN",
                                },
                                message: d.message,
                            }
                        })
                        .collect()
                })
                .map_err(|status| KitError::Call {
                    call: "NodeWatchResources",
                    status: Box::new(status),
                })
            })
            .boxed()
    }};
}

/// Each claim's answer to `NodePrepareResources`, by uid: its devices, or its error.
pub type PrepareAnswers = BTreeMap<String, Result<Vec<PreparedDevice>, String>>;
/// Each claim's answer to `NodeUnprepareResources`, by uid.
pub type UnprepareAnswers = BTreeMap<String, Result<(), String>>;

impl Kubelet {
    /// A kubelet that finds the plugin at `registration_socket` (the kubelet's
    /// `plugins_registry/<driver>.sock`) and, like a 1.34+ kubelet, prefers
    /// `dra.v1.DRAPlugin`.
    pub fn new(registration_socket: impl Into<PathBuf>) -> Self {
        Self {
            registration_socket: registration_socket.into(),
            newest: DraService::V1,
            registered: None,
        }
    }

    /// A kubelet that speaks at most `service` (`V1beta1`: a 1.32 or 1.33 kubelet).
    pub fn speaking(mut self, service: DraService) -> Self {
        self.newest = service;
        self
    }

    /// The registration socket it uses.
    pub fn registration_socket(&self) -> &Path {
        &self.registration_socket
    }

    /// Registers the plugin as a kubelet does: `GetInfo`, the checks the kubelet makes
    /// of the answer, `NotifyRegistrationStatus(true)`, then a connection to the DRA
    /// socket. A failed check is said to the plugin (`plugin_registered: false` with the
    /// reason) and returned.
    pub async fn register(&mut self) -> Result<Registered, KitError> {
        let channel = dra_kubelet_proto::connect_unix(&self.registration_socket)
            .await
            .map_err(|e| KitError::Connect {
                socket: self.registration_socket.clone(),
                error: e.to_string(),
            })?;
        let mut registration = reg::registration_client::RegistrationClient::new(channel);
        let info = registration
            .get_info(reg::InfoRequest {})
            .await
            .map_err(|status| KitError::Call {
                call: "GetInfo",
                status: Box::new(status),
            })?
            .into_inner();
        let checked = self.check_info(&info);
        let (plugin_registered, error) = match &checked {
            Ok(_) => (true, String::new()),
            Err(e) => (false, e.to_string()),
        };
        registration
            .notify_registration_status(reg::RegistrationStatus {
                plugin_registered,
                error,
            })
            .await
            .map_err(|status| KitError::Call {
                call: "NotifyRegistrationStatus",
                status: Box::new(status),
            })?;
        let registered = checked?;
        let channel = dra_kubelet_proto::connect_unix(&registered.endpoint)
            .await
            .map_err(|e| KitError::Connect {
                socket: registered.endpoint.clone(),
                error: e.to_string(),
            })?;
        let client = match registered.service {
            DraService::V1 => Client::V1(
                dra_v1::dra_plugin_client::DraPluginClient::new(channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            ),
            DraService::V1beta1 => Client::V1beta1(
                dra_v1beta1::dra_plugin_client::DraPluginClient::new(channel.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            ),
        };
        self.registered = Some((registered.clone(), channel, client));
        Ok(registered)
    }

    /// The kubelet's checks of `GetInfo`'s answer (`pluginwatcher` and the DRA
    /// registration handler): the type, a name, an endpoint, a service it speaks.
    fn check_info(&self, info: &reg::PluginInfo) -> Result<Registered, KitError> {
        let refuse = |reason: String| Err(KitError::Registration { reason });
        if info.r#type != dra_kubelet_proto::DRA_PLUGIN_TYPE {
            return refuse(format!(
                "PluginInfo.type is {:?}; a DRA plugin's is {:?}",
                info.r#type,
                dra_kubelet_proto::DRA_PLUGIN_TYPE
            ));
        }
        if info.name.is_empty() {
            return refuse("PluginInfo.name (the driver name) is empty".into());
        }
        if info.endpoint.is_empty() {
            return refuse("PluginInfo.endpoint (the DRA socket) is empty".into());
        }
        let offers = |v: &str| info.supported_versions.iter().any(|s| s == v);
        let service = match self.newest {
            DraService::V1 if offers(SUPPORTED_V1) => DraService::V1,
            _ if offers(SUPPORTED_V1BETA1) => DraService::V1beta1,
            _ => {
                return refuse(format!(
                    "PluginInfo.supported_versions {:?} has no DRAPlugin service this kubelet speaks ({})",
                    info.supported_versions,
                    match self.newest {
                        DraService::V1 => "v1.DRAPlugin, v1beta1.DRAPlugin",
                        DraService::V1beta1 => "v1beta1.DRAPlugin",
                    }
                ));
            }
        };
        Ok(Registered {
            driver: info.name.clone(),
            endpoint: PathBuf::from(&info.endpoint),
            supported_versions: info.supported_versions.clone(),
            service,
        })
    }

    fn client(
        &mut self,
        call: &'static str,
    ) -> Result<&mut (Registered, Channel, Client), KitError> {
        self.registered
            .as_mut()
            .ok_or(KitError::NotRegistered { call })
    }

    /// `NodePrepareResources` for `claims`, in one call.
    pub async fn prepare(&mut self, claims: &[Claim]) -> Result<PrepareAnswers, KitError> {
        let (_, _, client) = self.client("NodePrepareResources")?;
        check_uids(claims)?;
        Ok(match client {
            Client::V1(c) => prepare_call!(dra_v1, c, claims)
                .into_iter()
                .map(|(uid, r)| {
                    let answer = if r.error.is_empty() {
                        Ok(r.devices
                            .into_iter()
                            .map(|d| PreparedDevice {
                                requests: d.request_names,
                                pool: d.pool_name,
                                device: d.device_name,
                                cdi_device_ids: d.cdi_device_ids,
                                share_id: d.share_id,
                            })
                            .collect())
                    } else {
                        Err(r.error)
                    };
                    (uid, answer)
                })
                .collect(),
            Client::V1beta1(c) => prepare_call!(dra_v1beta1, c, claims)
                .into_iter()
                .map(|(uid, r)| {
                    let answer = if r.error.is_empty() {
                        Ok(r.devices
                            .into_iter()
                            .map(|d| PreparedDevice {
                                requests: d.request_names,
                                pool: d.pool_name,
                                device: d.device_name,
                                cdi_device_ids: d.cdi_device_ids,
                                share_id: None,
                            })
                            .collect())
                    } else {
                        Err(r.error)
                    };
                    (uid, answer)
                })
                .collect(),
        })
    }

    /// `NodePrepareResources` for one claim: its devices, or its error as
    /// [`KitError::Claim`].
    pub async fn prepare_one(&mut self, claim: &Claim) -> Result<Vec<PreparedDevice>, KitError> {
        let mut answers = self.prepare(std::slice::from_ref(claim)).await?;
        match answers.remove(&claim.uid) {
            Some(Ok(devices)) => Ok(devices),
            Some(Err(error)) => Err(KitError::Claim {
                uid: claim.uid.clone(),
                error,
            }),
            None => Err(KitError::Claim {
                uid: claim.uid.clone(),
                error: "the plugin's answer has no entry for the claim".into(),
            }),
        }
    }

    /// `NodeUnprepareResources` for `claims`, in one call.
    pub async fn unprepare(&mut self, claims: &[Claim]) -> Result<UnprepareAnswers, KitError> {
        let (_, _, client) = self.client("NodeUnprepareResources")?;
        check_uids(claims)?;
        Ok(match client {
            Client::V1(c) => unprepare_call!(dra_v1, c, claims),
            Client::V1beta1(c) => unprepare_call!(dra_v1beta1, c, claims),
        })
    }

    /// The device health stream (`NodeWatchResources`) of the newest health service the
    /// plugin offers: every report as it comes.
    pub async fn watch_health(
        &mut self,
    ) -> Result<BoxStream<'static, Result<Vec<DeviceHealth>, KitError>>, KitError> {
        let (registered, channel, _) = self.client("NodeWatchResources")?;
        let offers = |v: &str| registered.supported_versions.iter().any(|s| s == v);
        let channel = channel.clone();
        if offers(SUPPORTED_HEALTH_V1) {
            Ok(health_stream!(dra_health_v1, channel))
        } else if offers(SUPPORTED_HEALTH_V1ALPHA1) {
            Ok(health_stream!(dra_health_v1alpha1, channel))
        } else {
            Err(KitError::Registration {
                reason: format!(
                    "PluginInfo.supported_versions {:?} offers no device health service",
                    registered.supported_versions
                ),
            })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn what_a_kubelet_never_sends_is_refused_before_sending() {
        let bad = [Claim::new("not-a-uuid", "ns", "c")];
        let err = check_uids(&bad).unwrap_err().to_string();
        assert!(err.contains("\"not-a-uuid\" is not a UUID"), "{err}");
        assert!(check_uids(&[Claim::new(uuid::Uuid::new_v4().to_string(), "ns", "c")]).is_ok());
        let err = check_size("NodePrepareResources", MAX_MESSAGE_BYTES + 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("4194305 bytes"), "{err}");
        assert!(
            check_size("NodePrepareResources", 2 << 20).is_ok(),
            "2 MiB is under the limit"
        );
    }

    #[tokio::test]
    async fn calls_before_registration_are_refused() {
        let mut kubelet = Kubelet::new("/nonexistent/plugins_registry/x.sock");
        let err = kubelet.prepare(&[]).await.unwrap_err().to_string();
        assert!(
            err.starts_with("NodePrepareResources before registration"),
            "{err}"
        );
        let err = kubelet.unprepare(&[]).await.unwrap_err().to_string();
        assert!(
            err.starts_with("NodeUnprepareResources before registration"),
            "{err}"
        );
        assert!(kubelet.watch_health().await.is_err());
    }
}
