//! The faults the soak injects, and the proxies in front of the API
//! server, istiod and Prometheus that make some of them.

use meshscope_e2e::faults::{FaultProxy, Mode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    ApiDown,
    ApiHang,
    IstiodDown,
    IstiodHang,
    PromError,
    PromHang,
    RotateRename,
    RotateCopyTruncate,
    KillLeader,
    TermLeader,
}

impl Fault {
    pub const ALL: [Fault; 10] = [
        Fault::ApiDown,
        Fault::ApiHang,
        Fault::IstiodDown,
        Fault::IstiodHang,
        Fault::PromError,
        Fault::PromHang,
        Fault::RotateRename,
        Fault::RotateCopyTruncate,
        Fault::KillLeader,
        Fault::TermLeader,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Fault::ApiDown => "API server down",
            Fault::ApiHang => "API server hangs",
            Fault::IstiodDown => "istiod down",
            Fault::IstiodHang => "istiod hangs",
            Fault::PromError => "Prometheus answers 500",
            Fault::PromHang => "Prometheus hangs",
            Fault::RotateRename => "log rotated by rename",
            Fault::RotateCopyTruncate => "log rotated by copytruncate",
            Fault::KillLeader => "leader SIGKILLed",
            Fault::TermLeader => "leader SIGTERMed",
        }
    }
}

pub struct Proxies {
    pub api: FaultProxy,
    pub istiod: FaultProxy,
    pub prom: FaultProxy,
}

impl Proxies {
    pub fn clear(&self) {
        for p in [&self.api, &self.istiod, &self.prom] {
            p.set(Mode::Pass);
        }
    }
}
