//! The [`BufferPool`] every endpoint keeps ([`super::EndpointState`]):
//! the buffers the provided [`super::Transport`] calls lend and take back.

/// A few buffers kept for reuse, ordered by capacity: what
/// [`super::Transport::take_buffer`] and [`super::Transport::give_buffer`] need. A buffer
/// keeps its length and contents while it waits, so that a receive into it
/// (which resizes it to the message) writes zeros only where it grows.
#[derive(Debug)]
pub struct BufferPool {
    /// Ascending by capacity.
    spare: Vec<Vec<u8>>,
    /// How many buffers it keeps.
    keep: usize,
}

impl Default for BufferPool {
    /// A pool that keeps four buffers.
    fn default() -> Self {
        Self {
            spare: Vec::new(),
            keep: 4,
        }
    }
}

impl BufferPool {
    /// A pool for a transport of `ranks` ranks: it keeps `2 ceil(lg P) + 2`
    /// buffers (at least four), what a Bruck or recursive-doubling
    /// allgather holds at once (a send buffer and one received frame per
    /// round) with the one the thread transport lends to each send, so that
    /// warm calls find every buffer they need here.
    pub fn for_ranks(ranks: usize) -> Self {
        Self {
            spare: Vec::new(),
            keep: (2 * sparse_core::cost::ceil_log2(ranks.max(1)) as usize + 2).max(4),
        }
    }
    /// The largest spare buffer (a receive may need the most room), or an
    /// empty one; its contents are unspecified.
    pub fn take(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }
    /// A buffer for a message of `len` bytes: the smallest spare one that
    /// holds it with a sixteenth to spare without being far larger (at most
    /// `2 len` plus 4 KiB); else the largest spare one, if it is smaller,
    /// grown; else a new one. A grown or new buffer gets an eighth to spare.
    /// So a small message does not carry off a large buffer (the thread
    /// transport ships this buffer to the receiver: a large one lent for a
    /// small message would leave this rank short of it at its next large
    /// send), and the buffers passed back and forth between ranks keep room
    /// for the messages of later calls, which differ a little from rank to
    /// rank and call to call. Its contents are unspecified.
    pub fn take_fitting(&mut self, len: usize) -> Vec<u8> {
        let roomy = len.saturating_add(len / 16);
        let close = |b: &Vec<u8>| {
            b.capacity() >= roomy && b.capacity() <= len.saturating_mul(2).saturating_add(4096)
        };
        if let Some(i) = self.spare.iter().position(close) {
            return self.spare.remove(i);
        }
        let mut buf = match self.spare.last() {
            Some(b) if b.capacity() < roomy => self.spare.pop().unwrap_or_default(),
            _ => Vec::new(),
        };
        buf.clear();
        buf.reserve_exact(len.saturating_add(len / 8));
        buf
    }
    /// Keeps `buf` if it is among the largest the pool keeps.
    pub fn give(&mut self, buf: Vec<u8>) {
        if buf.capacity() == 0 {
            return;
        }
        let at = self
            .spare
            .partition_point(|b| b.capacity() <= buf.capacity());
        self.spare.insert(at, buf);
        if self.spare.len() > self.keep {
            self.spare.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BufferPool;

    /// The pool keeps the four largest buffers; `take` hands out the
    /// largest, `take_fitting` the smallest that fits with room to spare
    /// and is not far larger, else the largest smaller one grown, else a new
    /// one; a buffer keeps its length while it waits.
    #[test]
    fn buffer_pool_keeps_the_largest_and_fits_requests() {
        let mut pool = BufferPool::default();
        pool.give(Vec::new()); // no allocation: not kept
        for cap in [10usize, 50, 20, 40, 30] {
            let mut b = Vec::with_capacity(cap);
            b.resize(cap / 2, 7u8);
            pool.give(b);
        }
        let caps = |p: &BufferPool| p.spare.iter().map(Vec::capacity).collect::<Vec<_>>();
        assert_eq!(caps(&pool), [20, 30, 40, 50]);
        // 25 bytes with a sixteenth to spare: 26, so 30.
        let fit = pool.take_fitting(25);
        assert_eq!((fit.capacity(), fit.len()), (30, 15));
        // 40 holds 39 but not 39 + 2: the next one, 50, is taken instead.
        assert_eq!(pool.take_fitting(39).capacity(), 50);
        // Nothing holds 60: the largest smaller one, 40, grown to 60 + 7.
        let grown = pool.take_fitting(60);
        assert_eq!((grown.capacity(), grown.len()), (67, 0));
        assert_eq!(caps(&pool), [20]);
        // A small message does not take a buffer far larger than it.
        pool.give(Vec::with_capacity(100_000));
        assert_eq!(pool.take_fitting(10).capacity(), 20);
        assert_eq!(pool.take_fitting(10).capacity(), 11);
        assert_eq!(pool.take().capacity(), 100_000);
        // Enough for a send and one frame per round of lg P, plus a lent one.
        let keeps = [1, 2, 4, 5, 8, 64].map(|p| BufferPool::for_ranks(p).keep);
        assert_eq!(keeps, [4, 4, 6, 8, 8, 14]);
    }
}
