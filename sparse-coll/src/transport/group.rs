//! A [`Transport`] view of a subset of ranks (a sub-communicator), for
//! algorithms that run steps inside teams (SparDL's R-SAG and B-SAG): the
//! intercepting transport ([`Intercepting`]) with the renumbering as its
//! hook.

use crate::Transport;
use crate::transport::{Intercept, Intercepting};
use sparse_core::{Error, Result};

/// The ranks `members` of a parent transport, renumbered `0..members.len()`
/// in the order given. Sends and receives go through the parent, so the
/// parent's traffic counts them; [`Transport::traffic`] is the parent's. A
/// collective that fails part way on the group abandons the parent: the
/// peers waiting on this rank are members of both. Its dense allreduce is
/// the ring over the members.
///
/// A group shares the parent's links and messages are matched by source and
/// order only (MPI communicators also keep contexts apart; this view does
/// not), so the steps of one group must be finished before another group,
/// or the parent, uses a link between the same two ranks.
pub type Group<'a, T> = Intercepting<'a, T, Members>;

/// The renumbering of a [`Group`]: its members' parent ranks, and this
/// rank's place among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    members: Vec<usize>,
    rank: usize,
}

impl<'a, T: Transport + ?Sized> Intercepting<'a, T, Members> {
    /// The group of `members` (parent ranks, distinct), which must include
    /// the parent's own rank.
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] if this rank is not a member, a member
    /// repeats, or a member is not a rank of the parent.
    pub fn new(parent: &'a mut T, members: Vec<usize>) -> Result<Self> {
        let invalid = |reason: String| Error::invalid("members", reason);
        let size = parent.size();
        if let Some(&m) = members.iter().find(|&&m| m >= size) {
            return Err(invalid(format!("rank {m} of {size}")));
        }
        let mut sorted = members.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(invalid("a rank repeats".into()));
        }
        let me = parent.rank();
        let rank = members
            .iter()
            .position(|&m| m == me)
            .ok_or_else(|| invalid(format!("rank {me} is not a member")))?;
        Ok(Self::wrap(parent, Members { members, rank }))
    }
}

impl Intercept for Members {
    fn rank(&self, _: usize) -> usize {
        self.rank
    }
    fn size(&self, _: usize) -> usize {
        self.members.len()
    }
    fn peer(&self, r: usize) -> Result<usize> {
        self.members.get(r).copied().ok_or(Error::NoSuchRank {
            rank: r,
            size: self.members.len(),
        })
    }
    /// The parent's dense allreduce spans all its ranks, not the group's.
    fn inner_allreduce(&self) -> bool {
        false
    }
}
