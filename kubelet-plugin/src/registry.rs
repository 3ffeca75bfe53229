//! The open list of device profiles. A profile is one module that exports a
//! [`Registration`]: its name, its own flags, the inventory file fields it owns, and how
//! to build it for a node. Adding one is that module plus its line in
//! [`crate::PROFILES`]; nothing here, in [`crate::inventory`] or in `main.rs` names a
//! profile.
//!
//! At start the plugin (or fleet mode) turns the flags and the inventory file into
//! [`Profiles`], checking everything they say ([`Profiles::check`]); each node's profile
//! is then [`Profiles::build`] of its name.

use std::collections::BTreeMap;
use std::fmt;

use clap::{ArgMatches, Command};
use futures::future::BoxFuture;
use serde_json::Value;

use dra_kubelet_plugin::Plugin;
use dra_kubelet_plugin::device::SliceSplit;
use dra_kubelet_plugin::device::{CounterSet, SliceDevice};

use crate::inventory::{InventoryError, InventoryFile, NodeEntry};

/// Fields of an inventory file, or of one of its `nodes` entries, as written.
pub type Fields = serde_json::Map<String, Value>;

/// The flag that picks the profile of a node the inventory file does not place.
pub const PROFILE_FLAG: &str = "profile";

/// The subcommand whose nodes take the same profile flags as the node plugin.
pub const FLEET_SUBCOMMAND: &str = "fleet";

/// The node name [`Profiles::check`] builds profiles for: any valid name does, since a
/// name changes device ids, never whether a profile can be built.
const PROBE_NODE: &str = "profile-check";

/// One device profile, as its module registers it.
pub struct Registration {
    /// What `--profile` and an entry's `profile:` call it.
    pub name: &'static str,
    /// One line for `--help` and errors.
    pub about: &'static str,
    /// The `nodes` entry fields (camelCase) it reads, besides `names` and `profile`.
    pub entry_fields: &'static [&'static str],
    /// The file's top-level fields it reads, besides `apiVersion`, `kind` and `nodes`.
    pub file_fields: &'static [&'static str],
    /// Adds its flags to a command (usually `<its flags struct as clap::Args>::augment_args`).
    /// Every flag follows the `FAKE_DRA_<FLAG>` environment rule.
    pub flags: fn(Command) -> Command,
    /// Reads its flags and its top-level file fields (empty without a file), checking
    /// their syntax; what needs a node is checked by [`ProfileSettings::build`].
    pub settings: ReadSettings,
}

/// [`Registration::settings`]: the parsed command line and the file's fields of the
/// profile to its settings, or why they are unusable.
pub type ReadSettings = fn(&ArgMatches, &Fields) -> Result<Box<dyn ProfileSettings>, String>;

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("entry_fields", &self.entry_fields)
            .field("file_fields", &self.file_fields)
            .finish_non_exhaustive()
    }
}

/// A profile's flags and file sections, read: builds the profile of any node.
pub trait ProfileSettings: Send + Sync {
    /// Checks an entry's fields of this profile on their own (the flags filling what the
    /// entry leaves out are checked at [`Self::build`]). Errors name the entry's field.
    fn check_entry(&self, entry: &Fields) -> Result<(), String>;

    /// The profile of `node` for `driver`: the entry's fields (`None`: no entry matched)
    /// with the flags for what it leaves out. Errors name the field or the flag the bad
    /// value came from.
    fn build(
        &self,
        node: &str,
        driver: &str,
        entry: Option<&Fields>,
    ) -> Result<Box<dyn NodeProfile>, String>;
}

/// What the node plugin and fleet mode need of a node's built profile, whatever it is.
pub trait NodeProfile: fmt::Debug + Send + Sync {
    /// The registered name.
    fn profile_name(&self) -> &'static str;
    /// The devices the node publishes.
    fn slice_devices(&self) -> Vec<SliceDevice>;
    /// The counter sets they consume from.
    fn counter_sets(&self) -> Vec<CounterSet>;
    /// How they are spread over the node's slices.
    fn slice_split(&self) -> SliceSplit {
        SliceSplit::Packed
    }
    /// Whether it prepares classic DRA's allocation handles; the plugin refuses
    /// `--mode classic` for a profile that does not.
    fn classic(&self) -> bool {
        false
    }
    /// Serves the node's devices with `plugin` (the profile adds what it needs, such as
    /// a classic publisher) until `shutdown` completes.
    fn run(
        self: Box<Self>,
        plugin: Plugin,
        node: NodeContext,
        shutdown: BoxFuture<'static, ()>,
    ) -> BoxFuture<'static, Result<(), dra_kubelet_plugin::Error>>;
}

/// What a profile's [`NodeProfile::run`] may use besides the plugin.
#[derive(Clone)]
pub struct NodeContext {
    /// The API client the plugin uses.
    pub client: kube::Client,
    /// `--namespace`: where namespaced objects of the driver live.
    pub namespace: String,
    /// This node.
    pub node_name: String,
}

impl fmt::Debug for NodeContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeContext")
            .field("namespace", &self.namespace)
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// A registry that cannot be used: two profiles with one name, or one field claimed
/// twice (a bug in the binary, caught by its tests).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("profile {name:?} is registered twice")]
    DuplicateName { name: &'static str },
    #[error(
        "inventory field {field:?} is claimed by profiles {first:?} and {second:?}; a field belongs to one profile"
    )]
    DuplicateField {
        field: &'static str,
        first: &'static str,
        second: &'static str,
    },
    #[error("profile {name:?} is not a name: {reason}")]
    BadName {
        name: &'static str,
        reason: &'static str,
    },
    #[error("no profile is registered")]
    Empty,
}

/// The profiles a binary offers, checked.
#[derive(Debug, Clone)]
pub struct Registry {
    profiles: Vec<&'static Registration>,
}

/// Fields of the file and of entries that are no profile's.
const FILE_HEADER: &[&str] = &["apiVersion", "kind", "nodes"];
const ENTRY_HEADER: &[&str] = &["names", PROFILE_FLAG];

impl Registry {
    /// The registry of `profiles`, refusing duplicate names and fields claimed twice.
    pub fn new(profiles: &[&'static Registration]) -> Result<Self, RegistryError> {
        if profiles.is_empty() {
            return Err(RegistryError::Empty);
        }
        let mut names: Vec<&'static str> = Vec::new();
        // Entry fields and top-level fields are separate places: the fake profile's
        // entry `models` and the gpu profile's top-level `models` do not clash.
        let header = |fields: &[&'static str]| -> BTreeMap<&'static str, &'static str> {
            fields.iter().map(|f| (*f, "the inventory file")).collect()
        };
        let mut entry_owners = header(ENTRY_HEADER);
        let mut file_owners = header(FILE_HEADER);
        for r in profiles {
            if r.name.is_empty()
                || !r
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(RegistryError::BadName {
                    name: r.name,
                    reason: "use lowercase letters, digits and '-'",
                });
            }
            if names.contains(&r.name) {
                return Err(RegistryError::DuplicateName { name: r.name });
            }
            names.push(r.name);
            for (owners, fields) in [
                (&mut entry_owners, r.entry_fields),
                (&mut file_owners, r.file_fields),
            ] {
                for field in fields {
                    if let Some(first) = owners.insert(field, r.name) {
                        return Err(RegistryError::DuplicateField {
                            field,
                            first,
                            second: r.name,
                        });
                    }
                }
            }
        }
        Ok(Self {
            profiles: profiles.to_vec(),
        })
    }

    /// The registered names, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.profiles.iter().map(|r| r.name).collect()
    }

    /// The profile named `name`.
    pub fn get(&self, name: &str) -> Option<&'static Registration> {
        self.profiles.iter().copied().find(|r| r.name == name)
    }

    fn names_joined(&self) -> String {
        self.names().join(", ")
    }

    /// `command` (and its [`FLEET_SUBCOMMAND`], if any) with every profile's flags, and
    /// `--profile` limited to the registered names.
    pub fn augment(&self, command: Command) -> Command {
        let with_profiles = |mut command: Command| {
            // A flags struct's `augment_args` sets the command's about to the struct's doc
            // comment ("The nvidia profile's flags"): the command keeps its own.
            let about = command.get_about().cloned();
            let long_about = command.get_long_about().cloned();
            for r in &self.profiles {
                command = (r.flags)(command);
            }
            let keep = |v: Option<clap::builder::StyledStr>| {
                v.map_or(
                    clap::builder::Resettable::Reset,
                    clap::builder::Resettable::Value,
                )
            };
            command = command.about(keep(about)).long_about(keep(long_about));
            if command.get_arguments().any(|a| a.get_id() == PROFILE_FLAG) {
                let names = self.names();
                command = command.mut_arg(PROFILE_FLAG, |a| {
                    a.value_parser(clap::builder::PossibleValuesParser::new(names))
                });
            }
            command
        };
        let command = with_profiles(command);
        if command.find_subcommand(FLEET_SUBCOMMAND).is_some() {
            command.mut_subcommand(FLEET_SUBCOMMAND, with_profiles)
        } else {
            command
        }
    }

    /// The profile owning entry field `field`.
    fn owner_of_entry_field(&self, field: &str) -> Option<&'static Registration> {
        self.profiles
            .iter()
            .copied()
            .find(|r| r.entry_fields.contains(&field))
    }

    /// What the registry checks of a file's structure: top-level fields that some
    /// profile reads, entries naming registered profiles and giving fields of one
    /// profile only. Each profile checks its own fields' values ([`Self::profiles`]).
    pub(crate) fn check_file(
        &self,
        sections: &Fields,
        nodes: &[NodeEntry],
    ) -> Result<(), (Option<usize>, String)> {
        for field in sections.keys() {
            if !self
                .profiles
                .iter()
                .any(|r| r.file_fields.contains(&field.as_str()))
            {
                return Err((
                    None,
                    self.unknown_field(field, FILE_HEADER, |r| r.file_fields),
                ));
            }
        }
        for (index, entry) in nodes.iter().enumerate() {
            self.check_entry_fields(entry)
                .map_err(|reason| (Some(index), reason))?;
        }
        Ok(())
    }

    fn unknown_field(
        &self,
        field: &str,
        header: &[&str],
        fields: impl Fn(&Registration) -> &'static [&'static str],
    ) -> String {
        let mut known: Vec<String> = header.iter().map(|f| (*f).to_owned()).collect();
        for r in &self.profiles {
            let own = fields(r);
            if !own.is_empty() {
                known.push(format!("{} ({} profile)", own.join(", "), r.name));
            }
        }
        format!(
            "unknown field `{}`; the fields are {}",
            crate::inventory::cut(field),
            known.join(", ")
        )
    }

    fn check_entry_fields(&self, entry: &NodeEntry) -> Result<(), String> {
        let named = match entry.profile.as_deref() {
            None => None,
            Some(name) => Some(self.get(name).ok_or_else(|| {
                format!(
                    "profile {} is not a profile; the profiles are {}",
                    crate::inventory::shown(name),
                    self.names_joined()
                )
            })?),
        };
        let mut owner: Option<(&'static Registration, &str)> = None;
        for field in entry.fields.keys() {
            let Some(r) = self.owner_of_entry_field(field) else {
                return Err(self.unknown_field(field, ENTRY_HEADER, |r| r.entry_fields));
            };
            if let Some(named) = named
                && named.name != r.name
            {
                return Err(other_profiles_field(
                    field,
                    r.name,
                    named.name,
                    "its profile",
                ));
            }
            match owner {
                Some((first, first_field)) if first.name != r.name => {
                    return Err(format!(
                        "gives {first_field} ({} profile) and {field} ({} profile); a node runs one profile",
                        first.name, r.name
                    ));
                }
                _ => owner = Some((r, field)),
            }
        }
        Ok(())
    }

    /// The profiles some node can run: `default` (`--profile`) and those the file's
    /// entries name or imply by their fields.
    fn used_profiles(
        &self,
        default: &'static Registration,
        file: Option<&InventoryFile>,
    ) -> Vec<&'static str> {
        let mut used = vec![default.name];
        for entry in file.iter().flat_map(|f| f.nodes.iter()) {
            let owner = match &entry.profile {
                Some(name) => self.get(name),
                None => entry
                    .fields
                    .keys()
                    .find_map(|f| self.owner_of_entry_field(f))
                    .or(Some(default)),
            };
            if let Some(r) = owner
                && !used.contains(&r.name)
            {
                used.push(r.name);
            }
        }
        used
    }

    /// A profile flag given for a profile no node runs did nothing (`--profile fake
    /// --gpus …`), or drew a misleading error from the profile that does run (`--profile
    /// gpu --nvidia-gpus …`: "--gpus lists no GPUs"). Given on the command line it is
    /// refused naming its profile; from the environment (a DaemonSet keeps its
    /// `FAKE_DRA_NUM_DEVICES` when `FAKE_DRA_PROFILE` changes) it is a warning.
    fn check_unused_flags(
        &self,
        matches: &ArgMatches,
        default: &'static Registration,
        file: Option<&InventoryFile>,
    ) -> Result<(), InventoryError> {
        let used = self.used_profiles(default, file);
        for r in self.profiles.iter().filter(|r| !used.contains(&r.name)) {
            let own = (r.flags)(Command::new(r.name));
            for arg in own.get_arguments() {
                let id = arg.get_id().as_str();
                let Ok(source) = matches.try_get_raw(id).map(|_| matches.value_source(id)) else {
                    continue;
                };
                let flag = arg
                    .get_long()
                    .map_or_else(|| id.to_owned(), |l| format!("--{l}"));
                let env = arg
                    .get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let inventory = if file.is_some() {
                    format!(" and no inventory entry uses the {} profile", r.name)
                } else {
                    String::new()
                };
                match source {
                    Some(clap::parser::ValueSource::CommandLine) => {
                        return Err(InventoryError::OtherProfilesFlag {
                            flag,
                            env,
                            owner: r.name,
                            profile: default.name,
                            inventory,
                        });
                    }
                    Some(clap::parser::ValueSource::EnvVariable) => {
                        tracing::warn!(
                            "{env} ({flag}) is a setting of the {} profile, but --profile (FAKE_DRA_PROFILE) is {}{inventory}: ignored",
                            r.name,
                            default.name
                        );
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Reads every profile's flags from `matches` and the file's sections, checks each
    /// `nodes` entry with its profile, and keeps `default` (`--profile`) for the nodes
    /// and entries that do not name one.
    pub fn profiles(
        &self,
        matches: &ArgMatches,
        default: &str,
        file: Option<InventoryFile>,
    ) -> Result<Profiles, InventoryError> {
        let default = self
            .get(default)
            .ok_or_else(|| InventoryError::UnknownProfile {
                got: default.to_owned(),
                known: self.names_joined(),
            })?;
        self.check_unused_flags(matches, default, file.as_ref())?;
        let empty = Fields::new();
        let mut settings = BTreeMap::new();
        for r in &self.profiles {
            let sections: Fields = match &file {
                Some(f) => f
                    .sections
                    .iter()
                    .filter(|(k, _)| r.file_fields.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                None => empty.clone(),
            };
            let read = (r.settings)(matches, &sections).map_err(|reason| match &file {
                Some(f) if !sections.is_empty() => InventoryError::Section {
                    file: f.source.clone(),
                    reason,
                },
                _ => InventoryError::Settings {
                    profile: r.name,
                    reason,
                },
            })?;
            settings.insert(r.name, read);
        }
        let profiles = Profiles {
            registry: self.clone(),
            default,
            settings,
            file,
        };
        if let Some(f) = &profiles.file {
            for (index, entry) in f.nodes.iter().enumerate() {
                let Some(r) = profiles.owner(entry) else {
                    continue;
                };
                profiles.settings[r.name]
                    .check_entry(&entry.fields)
                    .map_err(|reason| InventoryError::Entry {
                        file: f.source.clone(),
                        index,
                        reason,
                    })?;
            }
        }
        Ok(profiles)
    }
}

fn other_profiles_field(field: &str, owner: &str, profile: &str, why: &str) -> String {
    format!(
        "gives {field}, a field of the {owner} profile, but {why} is {profile}; set profile: {owner} or drop {field}"
    )
}

/// Every profile's settings and the inventory file: builds the profile of any node.
pub struct Profiles {
    registry: Registry,
    default: &'static Registration,
    settings: BTreeMap<&'static str, Box<dyn ProfileSettings>>,
    file: Option<InventoryFile>,
}

impl fmt::Debug for Profiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profiles")
            .field("default", &self.default.name)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl Profiles {
    /// The profile an entry's fields belong to: its `profile`, else the one owning its
    /// fields, else none (an entry of names only takes `--profile`).
    fn owner(&self, entry: &NodeEntry) -> Option<&'static Registration> {
        match &entry.profile {
            Some(name) => self.registry.get(name),
            None => entry
                .fields
                .keys()
                .find_map(|f| self.registry.owner_of_entry_field(f)),
        }
    }

    /// `--profile`'s profile.
    pub fn default_profile(&self) -> &'static str {
        self.default.name
    }

    /// The profile of `node` for `driver`: the first entry of the file whose pattern
    /// matches the node, with the flags for what it leaves out, or the flags alone.
    pub fn build(&self, node: &str, driver: &str) -> Result<Box<dyn NodeProfile>, InventoryError> {
        if node.is_empty() {
            return Err(InventoryError::NoNodeName);
        }
        let matched = self.file.as_ref().and_then(|f| {
            f.nodes
                .iter()
                .enumerate()
                .find(|(_, e)| e.matches(node))
                .map(|(i, e)| (f, i, e))
        });
        let Some((f, index, entry)) = matched else {
            return self.settings[self.default.name]
                .build(node, driver, None)
                .map_err(|reason| InventoryError::Flags {
                    node: node.to_owned(),
                    reason,
                });
        };
        self.build_entry(entry, node, driver)
            .map_err(|reason| InventoryError::Entry {
                file: f.source.clone(),
                index,
                reason: format!("(matching node {node:?}) {reason}"),
            })
    }

    /// The profile of `node` from `entry`, with its profile's flags for what the entry
    /// leaves out.
    fn build_entry(
        &self,
        entry: &NodeEntry,
        node: &str,
        driver: &str,
    ) -> Result<Box<dyn NodeProfile>, String> {
        let (profile, why) = match &entry.profile {
            Some(name) => (name.as_str(), "its profile"),
            None => (self.default.name, "its profile (from --profile)"),
        };
        if let Some(owner) = self.owner(entry)
            && owner.name != profile
            && let Some(field) = entry.fields.keys().next()
        {
            return Err(other_profiles_field(field, owner.name, profile, why));
        }
        let settings = self
            .settings
            .get(profile)
            .ok_or_else(|| format!("profile {profile:?} is not a profile"))?;
        settings.build(node, driver, Some(&entry.fields))
    }

    /// Builds, for a probe node, `--profile`'s profile from the flags alone and each
    /// entry's with the flags it needs, so that flags no node could use are refused at
    /// start (in fleet mode too, before any node is created).
    pub fn check(&self, driver: &str) -> Result<(), InventoryError> {
        let covered = self
            .file
            .as_ref()
            .is_some_and(|f| f.nodes.iter().any(|e| e.names.iter().any(|p| p == "*")));
        if !covered {
            self.settings[self.default.name]
                .build(PROBE_NODE, driver, None)
                .map_err(|reason| InventoryError::Settings {
                    profile: self.default.name,
                    reason,
                })?;
        }
        if let Some(f) = &self.file {
            for (index, entry) in f.nodes.iter().enumerate() {
                self.build_entry(entry, PROBE_NODE, driver)
                    .map_err(|reason| InventoryError::Entry {
                        file: f.source.clone(),
                        index,
                        reason,
                    })?;
            }
        }
        Ok(())
    }
}

/// Decodes an entry's or a file's fields into a profile's own type, the error naming the
/// field serde found wrong.
pub fn decode<T: serde::de::DeserializeOwned>(fields: &Fields) -> Result<T, String> {
    serde_json::from_value(Value::Object(fields.clone())).map_err(|e| e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
