//! The crate's public API, compared with the committed `public-api.txt` (see
//! `api_list/mod.rs`): a change to the API is a change to that file, which CHANGELOG.md
//! names.

mod api_list;

#[test]
fn the_public_api_is_the_committed_one() {
    api_list::check(std::path::Path::new(env!("CARGO_MANIFEST_DIR")));
}
