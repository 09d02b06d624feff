//! The hash map the engine keys by its own strings and ids. A leaf.

/// Hash maps keyed by our own strings and ids: FxHash, not SipHash (no
/// untrusted keys reach them in a way that matters, and lookups are hot).
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;
