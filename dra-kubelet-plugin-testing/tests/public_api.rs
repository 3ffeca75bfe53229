//! The crate's public API, compared with the committed `public-api.txt` (the tool is
//! dra-kubelet-plugin's, `tests/api_list/mod.rs`).

#[path = "../../dra-kubelet-plugin/tests/api_list/mod.rs"]
mod api_list;

#[test]
fn the_public_api_is_the_committed_one() {
    api_list::check(std::path::Path::new(env!("CARGO_MANIFEST_DIR")));
}
