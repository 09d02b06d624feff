//! Auditing a loaded world: every finding in its namespaces and
//! selection, as `audit` and `report` show them. The rules are `shared`'s
//! ([`meshscope_shared::audit`]); this adds what only a live read can know
//! (meshscope's own webhook, MS0022).

use std::collections::BTreeSet;

use anyhow::Result;
use meshscope_shared as scope;
use scope::audit::{self, AuditScope, Code, Finding};
use scope::snapshot::WorkloadId;

use super::World;
use crate::live::FailureKind;
use crate::output::Printer;

impl World {
    /// Every finding in the world's namespaces and selection (`report` shows
    /// them too), exempt ones included.
    pub fn findings(&self, p: &mut Printer<'_>) -> Result<Vec<Finding>> {
        let world = self;
        let workloads: Option<BTreeSet<WorkloadId>> = world.selector.as_ref().map(|_| {
            (0..world.snap.workloads.len())
                .filter(|w| world.in_scope(*w))
                .collect()
        });
        let scope = AuditScope {
            namespaces: world.namespaces.as_ref(),
            workloads: workloads.as_ref(),
        };
        for w in audit::ignored_exemptions(&world.snap, &scope) {
            writeln!(p.err, "warning: {w}")?;
        }
        let mut found = audit::audit(&world.snap, world.obs.as_ref(), &scope);
        if workloads.is_none() {
            found.extend(world.installed_webhook(p)?);
        }
        // Without the Gateways, a namespace holding one could be proposed for
        // dropping, and a gateway's routes are unknown: whether it is ready
        // for cluster filtering (MS0025, MS0026) cannot be told.
        found.retain(|f| {
            !(world.gateways_unknown
                && matches!(
                    f.code,
                    Code::NamespaceNotNeeded
                        | Code::GatewayFilterDropsNeededCluster
                        | Code::GatewayFilterSafe
                ))
        });
        Ok(found)
    }

    /// MS0022 for meshscope's own webhook when its Service has no ready
    /// endpoint (live only: a cluster-scoped install, whatever `-n` says). A
    /// user who may not read webhook configurations gets no finding, and a
    /// note only when the failure is another one.
    fn installed_webhook(&self, p: &mut Printer<'_>) -> Result<Vec<Finding>> {
        let Some(ctx) = self.live.as_ref() else {
            return Ok(Vec::new());
        };
        match ctx.rt.block_on(ctx.live.meshscope_webhooks()) {
            Ok(w) => Ok(scope::installed::webhook_findings(&w)),
            Err(f) if matches!(f.kind, FailureKind::Forbidden(_)) => Ok(Vec::new()),
            Err(f) => {
                writeln!(
                    p.err,
                    "note: the admission webhook's state unknown (MS0022 not checked): {f}"
                )?;
                Ok(Vec::new())
            }
        }
    }
}
