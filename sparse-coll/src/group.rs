//! A [`Transport`] view of a subset of ranks (a sub-communicator), for
//! algorithms that run steps inside teams (SparDL's R-SAG and B-SAG).

use crate::{Traffic, Transport};
use sparse_core::{Error, Result};

/// The ranks `members` of a parent transport, renumbered `0..members.len()`
/// in the order given. Sends and receives go through the parent, so the
/// parent's traffic counts them; [`Transport::traffic`] is the parent's.
///
/// A group shares the parent's links and messages are matched by source and
/// order only (MPI communicators also keep contexts apart; this view does
/// not), so the steps of one group must be finished before another group,
/// or the parent, uses a link between the same two ranks.
#[derive(Debug)]
pub struct Group<'a, T: Transport + ?Sized> {
    parent: &'a mut T,
    members: Vec<usize>,
    rank: usize,
}

impl<'a, T: Transport + ?Sized> Group<'a, T> {
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
        Ok(Self {
            parent,
            members,
            rank,
        })
    }

    fn member(&self, r: usize) -> Result<usize> {
        self.members.get(r).copied().ok_or(Error::NoSuchRank {
            rank: r,
            size: self.members.len(),
        })
    }
}

impl<T: Transport + ?Sized> Transport for Group<'_, T> {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.members.len()
    }
    fn send(&mut self, to: usize, data: &[u8]) -> Result<()> {
        let to = self.member(to)?;
        self.parent.send(to, data)
    }
    fn recv(&mut self, from: usize) -> Result<Vec<u8>> {
        let from = self.member(from)?;
        self.parent.recv(from)
    }
    fn exchange(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        let (to, from) = (self.member(to)?, self.member(from)?);
        self.parent.exchange(to, data, from)
    }
    fn exchange_into(
        &mut self,
        to: usize,
        data: &[u8],
        from: usize,
        into: &mut Vec<u8>,
    ) -> Result<()> {
        let (to, from) = (self.member(to)?, self.member(from)?);
        self.parent.exchange_into(to, data, from, into)
    }
    fn recv_into(&mut self, from: usize, into: &mut Vec<u8>) -> Result<()> {
        let from = self.member(from)?;
        self.parent.recv_into(from, into)
    }
    fn take_buffer(&mut self) -> Vec<u8> {
        self.parent.take_buffer()
    }
    fn give_buffer(&mut self, buf: Vec<u8>) {
        self.parent.give_buffer(buf);
    }
    fn traffic(&self) -> Traffic {
        self.parent.traffic()
    }
    /// A collective that fails part way on the group abandons the parent:
    /// the peers waiting on this rank are members of both.
    fn abandon(&mut self) {
        self.parent.abandon();
    }
}
