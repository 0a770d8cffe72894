//! Why the data plane drops a packet: one reason per counter.

use snic_core::sched::Reject;
use snic_nt::DropReason;
use snic_wire::ParseError;

/// Why the data plane dropped a packet. Every drop is counted under one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Drop {
    /// Malformed or unsupported headers.
    Parse(ParseError),
    /// No MAT rule matched.
    NoRule,
    /// A MAT rule said drop.
    MatDrop,
    /// The packet store is full.
    StoreFull,
    /// The tenant is at its packet-store quota.
    TenantQuota,
    /// The scheduler refused it.
    Sched(Reject),
    /// An NT dropped it.
    Nt(DropReason),
    /// Egress has no route for its VNI and destination.
    NoRoute,
    /// Larger than a packet buffer allows.
    Oversize,
    /// The backend could not transmit it.
    TxError,
    /// Over the tenant's ingress limit (fair sharing, `snic_core::meter`).
    RateLimit,
    /// Lost in the tenant's own receive queue before the node read it (the queue was full: the
    /// node reads a tenant's queue no faster than its ingress limit). Counted per epoch from
    /// the backend's counters, not per packet.
    RxQueue,
    /// On a tenant's VNI from an outer source that is not one of the tenant's VTEPs (its
    /// Routes' or declared endpoints): spoofed or misdirected, never processed or learned from.
    ForeignVtep,
    /// A redirected packet from a peer that did not prove it is one of the pool (its tag does
    /// not verify under the pool's key, it has no key, or speaks another version).
    Unauthenticated,
    /// A redirected packet for a DAG this node does not host (any more).
    NotHosted,
    /// A redirected packet whose (sender, counter) was seen before, or is older than the
    /// sender's window: a replay (or a duplicate the network made).
    ReplayedRedirect,
    /// From one of the tenant's VTEP addresses, but in on another interface than the one the
    /// node reaches that VTEP through: the outer source address is forged.
    SpoofedVtep,
    /// Leaving on a VNI another tenant owns (an NT re-mapped it there): never delivered.
    ForeignVni,
    /// A redirected packet that crossed [`MAX_PASS_THROUGH`] pass-through nodes and was still
    /// not at the node that runs it: the pool's routes disagree (a loop), it goes no further.
    PassThroughHops,
}

/// Most pass-through nodes a redirected packet crosses (a ring of 32 nodes needs 15).
pub const MAX_PASS_THROUGH: u8 = 16;

const N_PARSE: usize = ParseError::ALL.len();
const N_SCHED: usize = 4;
const N_NT: usize = DropReason::ALL.len();

impl Drop {
    /// Number of distinct drop reasons (size of counter arrays).
    pub const COUNT: usize = N_PARSE + 4 + N_SCHED + N_NT + 12;

    /// Dense index for counter arrays.
    pub fn index(self) -> usize {
        match self {
            Drop::Parse(e) => e.index(),
            Drop::NoRule => N_PARSE,
            Drop::MatDrop => N_PARSE + 1,
            Drop::StoreFull => N_PARSE + 2,
            Drop::TenantQuota => N_PARSE + 3,
            Drop::Sched(r) => {
                N_PARSE
                    + 4
                    + match r {
                        Reject::UnknownDag => 0,
                        Reject::BadPosition => 1,
                        Reject::NoInstance => 2,
                        Reject::QueueFull => 3,
                    }
            }
            Drop::Nt(r) => N_PARSE + 4 + N_SCHED + r.index(),
            Drop::NoRoute => N_PARSE + 4 + N_SCHED + N_NT,
            Drop::Oversize => N_PARSE + 4 + N_SCHED + N_NT + 1,
            Drop::TxError => N_PARSE + 4 + N_SCHED + N_NT + 2,
            Drop::RateLimit => N_PARSE + 4 + N_SCHED + N_NT + 3,
            Drop::RxQueue => N_PARSE + 4 + N_SCHED + N_NT + 4,
            Drop::ForeignVtep => N_PARSE + 4 + N_SCHED + N_NT + 5,
            Drop::Unauthenticated => N_PARSE + 4 + N_SCHED + N_NT + 6,
            Drop::NotHosted => N_PARSE + 4 + N_SCHED + N_NT + 7,
            Drop::ReplayedRedirect => N_PARSE + 4 + N_SCHED + N_NT + 8,
            Drop::PassThroughHops => N_PARSE + 4 + N_SCHED + N_NT + 9,
            Drop::ForeignVni => N_PARSE + 4 + N_SCHED + N_NT + 10,
            Drop::SpoofedVtep => N_PARSE + 4 + N_SCHED + N_NT + 11,
        }
    }

    /// Stable snake_case name of the reason at `index` (metrics label).
    pub fn name(index: usize) -> &'static str {
        const SCHED: [&str; N_SCHED] = ["unknown_dag", "bad_dag_position", "no_instance", "queue_full"];
        match index {
            i if i < N_PARSE => ParseError::ALL[i].as_str(),
            i if i == N_PARSE => "no_rule",
            i if i == N_PARSE + 1 => "mat_drop",
            i if i == N_PARSE + 2 => "store_full",
            i if i == N_PARSE + 3 => "tenant_quota",
            i if i < N_PARSE + 4 + N_SCHED => SCHED[i - N_PARSE - 4],
            i if i < N_PARSE + 4 + N_SCHED + N_NT => DropReason::ALL[i - N_PARSE - 4 - N_SCHED].as_str(),
            i if i == N_PARSE + 4 + N_SCHED + N_NT => "no_route",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 1 => "oversize",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 2 => "tx_error",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 3 => "rate_limit",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 4 => "rx_queue_full",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 5 => "foreign_vtep",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 6 => "unauthenticated_redirect",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 7 => "not_hosted",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 8 => "replayed_redirect",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 9 => "pass_through_hops",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 10 => "foreign_vni",
            i if i == N_PARSE + 4 + N_SCHED + N_NT + 11 => "spoofed_vtep",
            _ => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_indices_are_dense_and_named() {
        let mut all: Vec<Drop> = ParseError::ALL.iter().map(|e| Drop::Parse(*e)).collect();
        all.extend([Drop::NoRule, Drop::MatDrop, Drop::StoreFull, Drop::TenantQuota]);
        all.extend([Reject::UnknownDag, Reject::BadPosition, Reject::NoInstance, Reject::QueueFull].map(Drop::Sched));
        all.extend(DropReason::ALL.iter().map(|r| Drop::Nt(*r)));
        all.extend([
            Drop::NoRoute,
            Drop::Oversize,
            Drop::TxError,
            Drop::RateLimit,
            Drop::RxQueue,
            Drop::ForeignVtep,
            Drop::Unauthenticated,
            Drop::NotHosted,
            Drop::ReplayedRedirect,
            Drop::PassThroughHops,
            Drop::ForeignVni,
            Drop::SpoofedVtep,
        ]);
        assert_eq!(all.len(), Drop::COUNT);
        let mut names = std::collections::HashSet::new();
        for (i, d) in all.iter().enumerate() {
            assert_eq!(d.index(), i);
            assert!(names.insert(Drop::name(i)), "duplicate name {}", Drop::name(i));
        }
    }
}
