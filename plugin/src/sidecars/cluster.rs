//! What the write layer works on: a [`Cluster`]. A leaf of the layer.

use std::collections::BTreeSet;

use anyhow::Result;
use meshscope_shared::snapshot::MeshSnapshot;

use crate::world::{LiveCtx, World};

/// The cluster connection, the mesh as read (which pods each Sidecar
/// scopes, which workloads are gone) and the namespaces read (`None`:
/// all).
#[derive(Clone, Copy)]
pub struct Cluster<'a> {
    pub ctx: &'a LiveCtx,
    pub snap: &'a MeshSnapshot,
    pub namespaces: Option<&'a BTreeSet<String>>,
}

impl<'a> Cluster<'a> {
    /// The cluster of a world read live (an error for files).
    pub fn of(world: &'a World) -> Result<Cluster<'a>> {
        Ok(Cluster {
            ctx: world.live_ctx()?,
            snap: &world.snap,
            namespaces: world.namespaces.as_ref(),
        })
    }
}
