//! Test a DRA driver built on [`dra_kubelet_plugin`] as a kubelet and a cluster would use
//! it, in `cargo test`, with nothing else installed:
//!
//! - [`ApiServer`]: an in-process Kubernetes API server with what a plugin uses
//!   (discovery, ResourceSlices, ResourceClaims, Nodes);
//! - [`TestNode`]: a node's directories in a temp dir, and the plugin running on them;
//! - [`Kubelet`]: the kubelet's calls over the plugin's real unix sockets — registration,
//!   `NodePrepareResources`, `NodeUnprepareResources`, the device health stream — refusing
//!   what a kubelet never sends (a call before registration, a claim uid that is not a
//!   UUID, a message over the gRPC limit);
//! - [`ClaimBuilder`], [`SliceBuilder`]: claims as the scheduler allocates them, slices
//!   as an earlier run left them;
//! - `cdi` (feature `cdi`, on by default): the specs checked with the CDI JSON schema and
//!   injected with the CDI library's Rust port, as a runtime would.
//!
//! ```no_run
//! # use dra_kubelet_plugin::DeviceProfile;
//! # async fn test<P: DeviceProfile>(profile: P) -> Result<(), dra_kubelet_plugin_testing::KitError> {
//! use dra_kubelet_plugin_testing::{ApiServer, ClaimBuilder, Claim, TestNode};
//!
//! let api = ApiServer::start().await?;
//! let node = TestNode::new("node-1")?;
//! let plugin = node.plugin("fpga.example.com", api.client()?);
//! let running = node.start("fpga.example.com", plugin, profile).await?;
//! let mut kubelet = running.kubelet();
//! kubelet.register().await?;
//!
//! let claim = api.create_claim(
//!     &ClaimBuilder::new("fpga.example.com", "node-1", "default", "c").device("cards", "fpga-0").build(),
//! )?;
//! let devices = kubelet.prepare_one(&Claim::of(&claim)).await?;
//! let container = dra_kubelet_plugin_testing::cdi::inject(&node.cdi_root(), &devices[0].cdi_device_ids)?;
//! assert!(container.env.iter().any(|e| e.starts_with("FPGA_")));
//! running.stop().await?;
//! # Ok(()) }
//! ```
//!
//! Why an in-process API server rather than a real or emulated cluster: a driver's tests
//! then need nothing but `cargo test` (no binaries, no ports but loopback, no root), and
//! run in milliseconds; what it leaves out (validation, version conversion, admission:
//! see [`api`]) is for a test on a real cluster.

#![warn(missing_docs)]

pub mod api;
#[cfg(feature = "cdi")]
pub mod cdi;
mod claims;
mod kubelet;
mod node;

use std::path::PathBuf;
use std::time::Duration;

pub use api::{ApiServer, ApiVersion};
pub use claims::{ClaimBuilder, SliceBuilder};
pub use kubelet::{
    Claim, DeviceHealth, DraService, Kubelet, MAX_MESSAGE_BYTES, PrepareAnswers, PreparedDevice,
    Registered, UnprepareAnswers,
};
pub use node::{RunningPlugin, TestNode};

/// What went wrong in a test, naming what a kubelet or cluster would have done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KitError {
    /// A call a kubelet makes only after registering the plugin.
    #[error(
        "{call} before registration: a kubelet calls a plugin only after GetInfo and NotifyRegistrationStatus; call Kubelet::register first"
    )]
    NotRegistered {
        /// The call.
        call: &'static str,
    },
    /// A claim uid a kubelet never sends.
    #[error(
        "claim uid {uid:?} is not a UUID: a kubelet sends the ResourceClaim's metadata.uid, which the API server makes a UUID (use the uid ApiServer::create_claim returns, or uuid::Uuid::new_v4)"
    )]
    NotAUuid {
        /// The uid (shortened).
        uid: String,
    },
    /// A request over the gRPC message limit.
    #[error(
        "{call} request is {bytes} bytes; a plugin's gRPC server (grpc-go's and tonic's default, so upstream's helper's and dra-kubelet-plugin's) refuses messages over {limit} bytes with ResourceExhausted: send fewer claims per call"
    )]
    TooLarge {
        /// The call.
        call: &'static str,
        /// The encoded request's size.
        bytes: usize,
        /// [`MAX_MESSAGE_BYTES`].
        limit: usize,
    },
    /// The plugin's registration answer is one a kubelet refuses.
    #[error("registration refused as a kubelet would refuse it: {reason}")]
    Registration {
        /// Why.
        reason: String,
    },
    /// A socket could not be dialled.
    #[error("dialling {socket}: {error}")]
    Connect {
        /// The socket.
        socket: PathBuf,
        /// Why.
        error: String,
    },
    /// A call failed as a whole.
    #[error("{call} failed: {status}")]
    Call {
        /// The call.
        call: &'static str,
        /// The gRPC status.
        status: Box<tonic::Status>,
    },
    /// The plugin refused one claim.
    #[error("claim {uid}: {error}")]
    Claim {
        /// The claim uid.
        uid: String,
        /// The plugin's error for it.
        error: String,
    },
    /// The plugin stopped with an error.
    #[error("the plugin stopped: {0}")]
    Plugin(#[source] dra_kubelet_plugin::Error),
    /// The plugin stopped before it registered, without an error.
    #[error("the plugin stopped before it put its registration socket up")]
    Stopped,
    /// Something did not happen in time.
    #[error("waited {limit:?} for {what}")]
    Timeout {
        /// What.
        what: String,
        /// How long.
        limit: Duration,
    },
    /// A CDI spec the independent checks refuse.
    #[error("CDI {}: {}", path.display(), problems.join("; "))]
    Cdi {
        /// The spec file (or directory).
        path: PathBuf,
        /// Every problem found.
        problems: Vec<String>,
    },
    /// A file could not be read.
    #[error("reading {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An I/O error of the kit itself.
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The test API server refused a request, or a client could not be made.
    #[error("test API server: {0}")]
    Client(String),
}

impl From<api::Refused> for KitError {
    fn from(r: api::Refused) -> Self {
        Self::Client(format!("{} ({} {})", r.message, r.code, r.reason))
    }
}
