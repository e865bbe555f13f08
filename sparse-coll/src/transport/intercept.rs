//! The one wrapper of a [`Transport`] ([`Intercepting`]) and its hooks
//! ([`Intercept`]): a view of some ranks ([`crate::Group`]), fault
//! injection, a test's panic.

use super::{Traffic, Transport, ring};
use sparse_core::Result;
use std::borrow::Cow;

/// The hooks of an [`Intercepting`] transport: each default passes the
/// call on unchanged, so a hook writes only what it changes (a
/// fault-injection wrapper its corruption, a view of some ranks its
/// renumbering, a test its panic).
pub trait Intercept {
    /// This view's rank, given the inner transport's (default: the same).
    fn rank(&self, inner: usize) -> usize {
        inner
    }
    /// This view's size, given the inner transport's (default: the same).
    fn size(&self, inner: usize) -> usize {
        inner
    }
    /// The inner transport's rank for this view's rank `r`, the peer of a
    /// send or receive (default: `r`).
    ///
    /// # Errors
    /// [`sparse_core::Error::NoSuchRank`] for a rank outside the view.
    fn peer(&self, r: usize) -> Result<usize> {
        Ok(r)
    }
    /// Called before each send, receive and exchange (either form), before
    /// anything is passed on: a hook may count calls here, fail or panic.
    ///
    /// # Errors
    /// The hook's: the call then fails without reaching the inner
    /// transport.
    fn call(&mut self) -> Result<()> {
        Ok(())
    }
    /// The bytes an outgoing message (a send or an exchange) carries:
    /// `data` by default, or a replacement.
    fn outgoing<'d>(&mut self, data: &'d [u8]) -> Cow<'d, [u8]> {
        Cow::Borrowed(data)
    }
    /// Whether the inner transport's dense allreduce
    /// ([`Transport::allreduce_sum_f32_into`]) serves this view (the
    /// default); a view of some of its ranks says `false`, and the ring
    /// over the view runs instead.
    fn inner_allreduce(&self) -> bool {
        true
    }
}

/// A transport that passes every call to an inner one through the hooks
/// of `H` ([`Intercept`]): the one wrapper of this crate that forwards
/// [`Transport`] methods, so that no wrapper forgets one (the receive
/// buffers, [`Transport::abandon`]). [`crate::Group`] (a view of some
/// ranks), the fault injection of the test suite (`testing::Corrupting`)
/// and the MPI suite's panic injection are its hooks.
pub struct Intercepting<'a, T: Transport + ?Sized, H> {
    inner: &'a mut T,
    hook: H,
}

impl<T: Transport + ?Sized, H: std::fmt::Debug> std::fmt::Debug for Intercepting<'_, T, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intercepting")
            .field("hook", &self.hook)
            .finish_non_exhaustive()
    }
}

impl<'a, T: Transport + ?Sized, H: Intercept> Intercepting<'a, T, H> {
    /// `inner` seen through `hook`.
    pub fn wrap(inner: &'a mut T, hook: H) -> Self {
        Self { inner, hook }
    }
    /// The hook, with whatever it recorded.
    pub fn hook(&self) -> &H {
        &self.hook
    }
}

impl<T: Transport + ?Sized, H: Intercept> Transport for Intercepting<'_, T, H> {
    fn rank(&self) -> usize {
        self.hook.rank(self.inner.rank())
    }
    fn size(&self) -> usize {
        self.hook.size(self.inner.size())
    }
    fn send(&mut self, to: usize, data: &[u8]) -> Result<()> {
        self.hook.call()?;
        let to = self.hook.peer(to)?;
        let data = self.hook.outgoing(data);
        self.inner.send(to, &data)
    }
    fn recv(&mut self, from: usize) -> Result<Vec<u8>> {
        self.hook.call()?;
        let from = self.hook.peer(from)?;
        self.inner.recv(from)
    }
    fn exchange(&mut self, to: usize, data: &[u8], from: usize) -> Result<Vec<u8>> {
        self.hook.call()?;
        let (to, from) = (self.hook.peer(to)?, self.hook.peer(from)?);
        let data = self.hook.outgoing(data);
        self.inner.exchange(to, &data, from)
    }
    fn exchange_into(
        &mut self,
        to: usize,
        data: &[u8],
        from: usize,
        into: &mut Vec<u8>,
    ) -> Result<()> {
        self.hook.call()?;
        let (to, from) = (self.hook.peer(to)?, self.hook.peer(from)?);
        let data = self.hook.outgoing(data);
        self.inner.exchange_into(to, &data, from, into)
    }
    fn recv_into(&mut self, from: usize, into: &mut Vec<u8>) -> Result<()> {
        self.hook.call()?;
        let from = self.hook.peer(from)?;
        self.inner.recv_into(from, into)
    }
    fn take_buffer(&mut self) -> Vec<u8> {
        self.inner.take_buffer()
    }
    fn give_buffer(&mut self, buf: Vec<u8>) {
        self.inner.give_buffer(buf);
    }
    /// The inner transport's: it counts every message this view passes.
    fn traffic(&self) -> Traffic {
        self.inner.traffic()
    }
    fn allreduce_sum_f32_into(&mut self, x: &[f32], out: &mut Vec<f32>) -> Result<()> {
        if self.hook.inner_allreduce() {
            self.inner.allreduce_sum_f32_into(x, out)
        } else {
            ring::ring_allreduce_into(self, x, out)
        }
    }
    /// Abandons the inner transport: the peers waiting on this rank wait
    /// on it there.
    fn abandon(&mut self) {
        self.inner.abandon();
    }
}
