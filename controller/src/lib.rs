//! The classic-DRA controller: allocates ResourceClaims from `FakeClaimParameters`. Filled in by the controller issue.
