//! The built-in sparse allreduces, one file each: everything about an
//! algorithm (its collective, its name, parameters, cost model, rounds,
//! bytes and result bound, its registry facts) is in its file, and
//! [`crate::registry`] lists them, one line each.

pub(crate) mod gtopk;
pub(crate) mod hierarchical;
pub(crate) mod ok_topk;
pub(crate) mod omnireduce;
pub(crate) mod push_pull;
pub(crate) mod spardl;
pub(crate) mod split_allgather;
pub(crate) mod ssar;
pub(crate) mod topk_a;
pub(crate) mod topk_dsa;
pub(crate) mod zen;
