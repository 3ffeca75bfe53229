use super::*;

fn no_flags(command: Command) -> Command {
    command
}

fn no_settings(_: &ArgMatches, _: &Fields) -> Result<Box<dyn ProfileSettings>, String> {
    Err("unused".into())
}

const fn registration(
    name: &'static str,
    entry_fields: &'static [&'static str],
    file_fields: &'static [&'static str],
) -> Registration {
    Registration {
        name,
        about: "a test profile",
        entry_fields,
        file_fields,
        flags: no_flags,
        settings: no_settings,
    }
}

static A: Registration = registration("a", &["x"], &["catalog"]);
static A_AGAIN: Registration = registration("a", &["y"], &[]);
static B_X: Registration = registration("b", &["x"], &[]);
static B_CATALOG: Registration = registration("b", &["catalog"], &["z"]);
static BAD: Registration = registration("Big Name", &[], &[]);
static NAMES: Registration = registration("c", &["names"], &[]);

#[test]
fn the_plugin_registry_is_valid_and_lists_every_profile() {
    let registry = crate::registry().unwrap();
    assert_eq!(registry.names(), ["fake", "gpu", "nvidia"]);
    assert_eq!(registry.get("gpu").unwrap().entry_fields, ["gpus"]);
    assert_eq!(registry.get("nvidia").unwrap().entry_fields, ["nvidiaGpus"]);
    assert!(registry.get("nvidia").unwrap().file_fields.is_empty());
    assert!(registry.get("tpu").is_none());
}

#[test]
fn two_profiles_of_one_name_or_one_field_are_refused() {
    assert_eq!(
        Registry::new(&[&A, &A_AGAIN]).unwrap_err(),
        RegistryError::DuplicateName { name: "a" }
    );
    assert_eq!(
        Registry::new(&[&A, &B_X]).unwrap_err().to_string(),
        "inventory field \"x\" is claimed by profiles \"a\" and \"b\"; a field belongs to one profile"
    );
    assert_eq!(
        Registry::new(&[&NAMES]).unwrap_err(),
        RegistryError::DuplicateField {
            field: "names",
            first: "the inventory file",
            second: "c"
        }
    );
    assert!(matches!(
        Registry::new(&[&BAD]),
        Err(RegistryError::BadName { .. })
    ));
    assert_eq!(Registry::new(&[]).unwrap_err(), RegistryError::Empty);
    // An entry field and a top-level field are different places.
    Registry::new(&[&A, &B_CATALOG]).unwrap();
}

#[test]
fn augment_adds_every_profiles_flags_to_the_command_and_to_fleet() {
    let registry = crate::registry().unwrap();
    let command = registry.augment(
        Command::new("plugin")
            .about("The plugin's own words")
            .arg(clap::Arg::new(PROFILE_FLAG).long(PROFILE_FLAG))
            .subcommand(
                Command::new(FLEET_SUBCOMMAND)
                    .about("Fleet's own words")
                    .arg(clap::Arg::new(PROFILE_FLAG).long(PROFILE_FLAG)),
            ),
    );
    // Not the last profile's flags struct's doc comment ("The nvidia profile's flags").
    assert_eq!(
        command.get_about().map(ToString::to_string).as_deref(),
        Some("The plugin's own words")
    );
    assert_eq!(
        command
            .find_subcommand(FLEET_SUBCOMMAND)
            .and_then(|f| f.get_about())
            .map(ToString::to_string)
            .as_deref(),
        Some("Fleet's own words")
    );
    let longs = |c: &Command| -> Vec<String> {
        c.get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned))
            .collect()
    };
    for flag in ["num-devices", "models", "gpus", "nvidia-gpus"] {
        assert!(longs(&command).iter().any(|l| l == flag), "{flag}");
        let fleet = command.find_subcommand(FLEET_SUBCOMMAND).unwrap();
        assert!(longs(fleet).iter().any(|l| l == flag), "fleet {flag}");
    }
    let err = command
        .clone()
        .try_get_matches_from(["plugin", "--profile", "tpu"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[possible values: fake, gpu, nvidia]"),
        "{err}"
    );
    let err = command
        .try_get_matches_from(["plugin", "--gpus", "L4-24GB:0"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("count must be between 1 and 128, got 0"),
        "{err}"
    );
}

#[test]
fn an_unregistered_profile_is_refused_by_name() {
    let registry = crate::registry().unwrap();
    let matches = registry
        .augment(Command::new("plugin"))
        .try_get_matches_from(["plugin"])
        .unwrap();
    assert_eq!(
        registry
            .profiles(&matches, "tpu", None)
            .unwrap_err()
            .to_string(),
        "unknown profile \"tpu\"; the profiles are fake, gpu, nvidia"
    );
}
